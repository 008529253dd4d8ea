import { Command } from 'commander';
import { z } from 'zod';
import { InvalidOptionsError, defineSignal, echoed } from '@palisade/sdk';
import { globalOptions, type Output } from './output.js';

/**
 * `palisade runs signal <id> <signal> [json]`: send a signal to a workflow run. The payload is JSON (default
 * `null`); without the workflow's module at hand it is checked here only for being storable JSON — the wait that
 * takes it checks it against its schema (a bad one makes that await throw VALIDATION_FAILED).
 */
export function runsSignalCommand(output: Output): Command {
  return new Command('signal')
    .description('send a signal to a workflow run (its code takes it with ctx.waitForSignal)')
    .argument('<id>', 'run id')
    .argument('<signal>', 'signal name, as defineSignal({ name }) gives it')
    .argument('[json]', 'payload as JSON, e.g. \'{"approved":true}\' (default: null)')
    .action(
      async (id: string, name: string, json: string | undefined, _options: unknown, command: Command) => {
        const g = globalOptions(command);
        let payload: unknown = null;
        if (json !== undefined) {
          try {
            payload = JSON.parse(json);
          } catch (error) {
            throw new InvalidOptionsError('runs signal', [
              { path: 'json', message: `is not JSON (${echoed((error as Error).message)}): ${echoed(json)}` },
            ]);
          }
        }
        const signal = defineSignal({ name, payload: z.unknown() });
        const { resolveTarget, withEngine } = await import('./open-engine.js');
        const signalId = await withEngine(resolveTarget(g), 'runs', (engine) =>
          engine.client.signal(id, signal, payload),
        );
        if (g.json) {
          output.printJson({ runId: id, signal: name, signalId });
          return;
        }
        output.line(`signal ${name} sent to run ${id} (#${signalId})`);
      },
    );
}
