import { Command } from 'commander';
import { isLiveRunStatus } from '../turn/state-machine.js';
import { z } from 'zod';
import { InvalidOptionsError, defineSignal, type SignalDefinition } from '@palisade/sdk';
import { echoed } from '@palisade/sdk/internal';
import type { Engine } from '../engine.js';
import { globalOptions, type Output } from './output.js';

/** A cap on what an error repeats of a name the user typed. */
const NAME_SHOWN = 80;

/**
 * `palisade runs signal <id> <signal> [json]`: send a signal to a workflow run. The payload is JSON (default
 * `null`). The name is checked against the signals the run has waited for (its `ctx.waitForSignal` steps) and
 * those the worker module given with `--module` exports; an unknown one is refused, listing the known ones, unless
 * `--force` (a wait the code has not reached yet). With `--module`, the payload is checked against the signal's
 * schema here; without it, the wait that takes it checks it, and one its schema refuses is recorded undelivered
 * (`runs show`) while the run goes on waiting.
 */
export function runsSignalCommand(output: Output): Command {
  return new Command('signal')
    .description('send a signal to a workflow run (its code takes it with ctx.waitForSignal)')
    .argument('<id>', 'run id')
    .argument('<signal>', 'signal name, as defineSignal({ name }) gives it')
    .argument('[json]', 'payload as JSON, e.g. \'{"approved":true}\' (default: null)')
    .option(
      '--module <path>',
      'the worker module (.js/.ts): its exported signals check the name and the payload against their schema',
    )
    .option('--force', 'send a signal the run has never waited for (a wait its code has not reached yet)')
    .action(
      async (
        id: string,
        name: string,
        json: string | undefined,
        options: { module?: string; force?: boolean },
        command: Command,
      ) => {
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
        let defined: SignalDefinition | undefined;
        let exported: readonly string[] = [];
        if (options.module !== undefined) {
          const { loadDefinitions } = await import('./load-definitions.js');
          const { signals } = await loadDefinitions(options.module, process.cwd());
          defined = signals.find((s) => s.name === name);
          exported = signals.map((s) => s.name);
        }
        // The module's definition checks the payload against its schema (VALIDATION_FAILED naming the field).
        const signal = defined ?? defineSignal({ name, payload: z.unknown() });
        const { resolveTarget, withEngine } = await import('./open-engine.js');
        const signalId = await withEngine(resolveTarget(g), 'runs', async (engine) => {
          if (!defined && options.force !== true) await checkName(engine, id, name, exported);
          return engine.client.signal(id, signal, payload);
        });
        if (g.json) {
          output.printJson({ runId: id, signal: name, signalId });
          return;
        }
        output.line(`signal ${name} sent to run ${id} (#${signalId})`);
      },
    );
}

/**
 * Refuse `name` unless run `runId` has waited for a signal of that name (a signal wait step, retired ones too) or
 * the worker module exports it (`exported`). A run that cannot be read, is not a workflow run or has ended is left
 * to `client.signal`, which refuses it with its own code (RUN_NOT_FOUND, INVALID_OPTIONS, RUN_ENDED).
 * @throws InvalidOptionsError naming the signal and the names the run knows.
 */
async function checkName(
  engine: Engine,
  runId: string,
  name: string,
  exported: readonly string[],
): Promise<void> {
  const described = await engine.client
    .getHandle(runId)
    .describe()
    .catch(() => undefined);
  if (!described || described.run.kind !== 'workflow') return;
  if (!isLiveRunStatus(described.run.status)) return;
  const waited = described.steps.filter((s) => s.kind === 'signal').map((s) => s.name);
  const known = [...new Set([...waited, ...exported])].sort();
  if (known.includes(name)) return;
  const shown = name.length > NAME_SHOWN ? `${name.slice(0, NAME_SHOWN)}…` : name;
  throw new InvalidOptionsError('runs signal', [
    {
      path: 'signal',
      message:
        `run ${runId} has never waited for a signal named ${JSON.stringify(shown)} ` +
        (known.length > 0
          ? `(known: ${known.join(', ')})`
          : '(it has not waited for any signal yet; --module names the ones its worker module exports)') +
        '; check the name, or pass --force to send it for a wait its code has not reached yet',
    },
  ]);
}
