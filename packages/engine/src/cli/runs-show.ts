import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { SHOWN_HEAD, SHOWN_TAIL, formatRunTimeline } from './timeline.js';

/**
 * `palisade runs show <id>`: the timeline of one run — every attempt (epoch, token, worker, outcome, duration),
 * every rejected stale write with the stale and the current token, and the run's event history. Errors are printed
 * whole (wrapped); a long list of attempts or events shows its first and last entries unless `--all`.
 */
export function runsShowCommand(output: Output): Command {
  return new Command('show')
    .description('show one run: every attempt, every rejected stale write, its events')
    .argument('<id>', 'run id (as `runs list` prints it)')
    .option('--no-events', 'leave out the event history')
    .option(
      '--all',
      `every attempt and event (a long list shows its first ${SHOWN_HEAD} and last ${SHOWN_TAIL})`,
    )
    .action(async (id: string, options: { events: boolean; all?: boolean }, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const timeline = await withEngine(resolveTarget(g), 'runs', (engine) =>
        engine.client.getHandle(id).describe(),
      );
      if (g.json) {
        output.printJson(timeline);
        return;
      }
      const lines = formatRunTimeline(output.terminal, timeline, {
        nowIso: new Date().toISOString(),
        events: options.events,
        all: options.all === true,
      });
      for (const line of lines) output.line(line);
    });
}
