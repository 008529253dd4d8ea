import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { formatRunTimeline } from './timeline.js';

/**
 * `palisade runs show <id>`: the timeline of one run — every attempt (epoch, token, worker, outcome, duration),
 * every rejected stale write with the stale and the current token, and the run's event history.
 */
export function runsShowCommand(output: Output): Command {
  return new Command('show')
    .description('show one run: every attempt, every rejected stale write, its events')
    .argument('<id>', 'run id (as `runs list` prints it)')
    .option('--no-events', 'leave out the event history')
    .action(async (id: string, options: { events: boolean }, command: Command) => {
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
      });
      for (const line of lines) output.line(line);
    });
}
