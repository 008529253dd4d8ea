import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { formatWatchedEvent } from './timeline.js';

/**
 * `palisade runs watch <id>`: print a run's events as they happen — from its start, or after `--after <cursor>` —
 * until its end, then exit 0. With `--json`, one event per line (NDJSON), each with the `cursor` to resume from.
 */
export function runsWatchCommand(output: Output): Command {
  return new Command('watch')
    .description("follow a run's events as they happen, until it ends")
    .argument('<id>', 'run id')
    .option('--after <cursor>', 'resume after this event (a cursor from `runs watch --json`)')
    .action(async (id: string, options: { after?: string }, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      await withEngine(resolveTarget(g), 'runs', async (engine) => {
        const handle = engine.client.getHandle(id);
        // The run's creation: what the clock column counts from (RUN_NOT_FOUND before any output).
        const reference = (await handle.describe({})).run.createdAt;
        for await (const event of handle.watch(options.after === undefined ? {} : { after: options.after })) {
          if (g.json) output.line(JSON.stringify(event));
          else output.line(formatWatchedEvent(output.terminal, event, reference));
        }
      });
    });
}
