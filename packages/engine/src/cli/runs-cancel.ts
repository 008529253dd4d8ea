import { Command } from 'commander';
import { globalOptions, type Output } from './output.js';
import { paint, statusStyle } from './format.js';
import { isLiveRunStatus } from '../turn/state-machine.js';

/**
 * `palisade runs cancel <id>`: request cancellation. Scheduled steps end at once; a running activity learns at
 * its next heartbeat; a standalone run, or a workflow run no turn has begun, ends at once. A run that already ended
 * is left as it is (exit 0, its status is printed).
 */
export function runsCancelCommand(output: Output): Command {
  return new Command('cancel')
    .description('cancel a run (a running activity stops at its next heartbeat)')
    .argument('<id>', 'run id')
    .option('--reason <text>', 'why, recorded with the run', 'cancelled from the CLI')
    .action(async (id: string, options: { reason: string }, command: Command) => {
      const g = globalOptions(command);
      const { resolveTarget, withEngine } = await import('./open-engine.js');
      const { before, after } = await withEngine(resolveTarget(g), 'runs', async (engine) => {
        const handle = engine.client.getHandle(id);
        const was = (await handle.describe()).run.status; // RUN_NOT_FOUND before anything changes
        const now = await handle.cancel(options.reason);
        // The cancel reports the run as it found it once it held its lock: a run that ended (other than
        // cancelled) between the read above and that lock had already ended, whatever the read said.
        return { before: now !== 'cancelled' && !isLiveRunStatus(now) ? now : was, after: now };
      });
      const ended = !isLiveRunStatus(before);
      if (g.json) {
        output.printJson({ runId: id, status: after, previousStatus: before, cancelRequested: !ended });
        return;
      }
      const t = output.terminal;
      if (ended)
        output.line(
          `run ${id} had already ended (${paint(t, statusStyle(before), before)}); nothing to cancel`,
        );
      else if (after === 'cancelled') output.line(`run ${id} ${paint(t, 'yellow', 'cancelled')}`);
      else {
        output.line(
          `cancel requested for run ${id} (${paint(t, statusStyle(after), after)}): ` +
            'a running activity stops at its next heartbeat',
        );
      }
    });
}
