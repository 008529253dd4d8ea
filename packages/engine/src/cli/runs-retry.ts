import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { paint, statusStyle } from './format.js';

/**
 * `palisade runs retry <id>`: run a failed or cancelled run again from its recorded history; failed steps get a
 * fresh retry budget, tokens and epochs keep growing.
 */
export function runsRetryCommand(output: Output): Command {
  return new Command('retry')
    .description('retry a failed or cancelled run from its recorded history')
    .argument('<id>', 'run id')
    .action(async (id: string, _options: unknown, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const status = await withEngine(resolveTarget(g), 'runs', async (engine) => {
        const handle = await engine.client.retry(id);
        return (await handle.describe()).run.status;
      });
      if (g.json) {
        output.printJson({ runId: id, status });
        return;
      }
      output.line(
        `run ${id} scheduled again (${paint(output.terminal, statusStyle(status), status)}); ` +
          'a worker serving it picks it up',
      );
    });
}
