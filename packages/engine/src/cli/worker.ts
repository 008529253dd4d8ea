import { constants } from 'node:os';
import { Command } from 'commander';
import type { Worker } from '../index.js';
import { formatFailure, paint, truncate, type Style } from './format.js';
import { globalOptions, type Output } from './output.js';
import { collect, wholeNumber } from './parse-arguments.js';

interface AttemptFields {
  readonly runId: string;
  readonly stepId: string;
  readonly stepLabel: string;
  readonly attempt: number;
  readonly token: bigint;
}

/** Print one line per thing the worker does: claims, completions, failures, stale rejections, turns. */
function reportEvents(worker: Worker, output: Output, json: boolean): void {
  const t = output.terminal;
  const emit = (
    event: string,
    word: string,
    style: Style | undefined,
    subject: string,
    runId: string,
    details: string,
    fields: Record<string, unknown>,
  ) => {
    const at = new Date().toISOString();
    if (json) {
      output.printJson({ at, event, runId, ...fields }, true);
      return;
    }
    output.line(
      `${paint(t, 'dim', at.slice(11, 23))}  ${paint(t, style, word.padEnd(9))}  ${subject}  run ${runId}` +
        (details ? `  ${details}` : ''),
    );
  };
  const ref = (a: AttemptFields) => ({
    stepId: a.stepId,
    step: a.stepLabel,
    attempt: a.attempt,
    token: a.token.toString(),
  });
  const e = worker.events;
  e.on('attempt:claimed', ({ attempt: a, epoch }) =>
    emit('attempt:claimed', 'claimed', 'cyan', a.stepLabel, a.runId, `epoch ${epoch} · token ${a.token}`, {
      ...ref(a),
      epoch,
    }),
  );
  e.on('attempt:completed', ({ attempt: a }) =>
    emit('attempt:completed', 'completed', 'green', a.stepLabel, a.runId, `token ${a.token}`, ref(a)),
  );
  e.on('attempt:failed', ({ attempt: a, failure, retry }) =>
    emit(
      'attempt:failed',
      'failed',
      'red',
      a.stepLabel,
      a.runId,
      `token ${a.token} · ${retry ? 'will retry' : 'final'} · ${formatFailure(failure) ?? ''}`,
      { ...ref(a), retry, failure: { type: failure.type, message: failure.message } },
    ),
  );
  e.on('attempt:stale-rejected', ({ attempt: a, error }) =>
    emit(
      'attempt:stale-rejected',
      'STALE',
      'magenta',
      a.stepLabel,
      a.runId,
      `${error.operation} rejected (${error.reason}) · stale token ${error.staleToken} · ` +
        `current token ${error.currentToken ?? 'none'}`,
      {
        ...ref(a),
        operation: error.operation,
        staleToken: error.staleToken.toString(),
        currentToken: error.currentToken?.toString() ?? null,
        reason: error.reason,
      },
    ),
  );
  e.on('attempt:released', ({ attempt: a, why }) =>
    emit('attempt:released', 'released', 'dim', a.stepLabel, a.runId, `token ${a.token} · ${why}`, {
      ...ref(a),
      why,
    }),
  );
  e.on('attempt:aborted', ({ attempt: a, reason }) =>
    emit('attempt:aborted', 'aborted', 'yellow', a.stepLabel, a.runId, `token ${a.token} · ${reason}`, {
      ...ref(a),
      reason,
    }),
  );
  e.on('turn:committed', ({ runId, workflow, outcome, replay, grant, error }) =>
    emit(
      'turn:committed',
      'turn',
      outcome === 'failed' ? 'red' : undefined,
      workflow,
      runId,
      // A run that ended failed or cancelled says why.
      error ? `${outcome} · ${formatFailure(error) ?? ''}` : outcome,
      {
        workflow,
        outcome,
        replay,
        grant,
        ...(error ? { error: { type: error.type, code: error.code, message: error.message } } : {}),
      },
    ),
  );
  e.on('worker:unserved-work', ({ kind, name, queue }) =>
    output.error(
      `${kind} ${name} has work due on queue ${queue}, and this worker does not register it: ` +
        `unless another worker does, the runs that need it wait forever`,
    ),
  );
  const problem = (what: string) => (x: { error: unknown }) =>
    output.error(`${what}: ${x.error instanceof Error ? x.error.message : String(x.error)}`);
  e.on('worker:error', problem('worker error'));
  e.on('heartbeat:failed', problem('heartbeat failed'));
}

/**
 * SIGINT/SIGTERM handling of a running worker: `first` resolves on the first signal; a second one exits at once
 * (the attempts still running keep their leases until they expire, so nothing is taken over early).
 */
function stopSignals(output: Output): { first: Promise<NodeJS.Signals>; dispose(): void } {
  let received: NodeJS.Signals | undefined;
  let resolveFirst: (signal: NodeJS.Signals) => void = () => undefined;
  const first = new Promise<NodeJS.Signals>((resolve) => (resolveFirst = resolve));
  const handler = (signal: NodeJS.Signals) => {
    if (received === undefined) {
      received = signal;
      resolveFirst(signal);
      return;
    }
    output.error(`${signal} again: exiting now; the leases of unfinished attempts expire on their own`);
    process.exit(128 + (constants.signals[signal] ?? 1)); // the shell's convention: 130 for SIGINT, 143 for SIGTERM
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return {
    first,
    dispose() {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}

interface WorkerCommandOptions {
  readonly queue?: string[];
  readonly concurrency?: number;
  readonly prefetch?: number;
  readonly workerId?: string;
  readonly graceMs?: number;
}

/**
 * `palisade worker <module>`: serve every workflow and activity the module exports until SIGINT or SIGTERM,
 * then stop gracefully (stop claiming, let running attempts finish for the grace period, release the rest)
 * and close the engine. A second signal exits at once; leases of unfinished attempts then expire on their own.
 */
export function workerCommand(output: Output): Command {
  return new Command('worker')
    .description('serve the workflows and activities a module exports (until SIGINT/SIGTERM)')
    .argument('<module>', 'path of a module exporting defineWorkflow()/defineActivity() values')
    .option('--queue <name>', 'queue to claim from; repeat for several (default: default)', collect)
    .option('--concurrency <n>', 'activity attempts run at once (default: 10)', wholeNumber(1, 1000))
    .option(
      '--prefetch <n>',
      'most grants claimed ahead of free slots while attempts run short (default: the concurrency or 50, the larger; 0: none)',
      wholeNumber(0, 1000),
    )
    .option('--worker-id <id>', 'name of this worker in attempts and events (default: host:pid:random)')
    .option(
      '--grace-ms <ms>',
      'on stop, how long running attempts may finish (default: 10000)',
      wholeNumber(0, 3_600_000),
    )
    .action(async (modulePath: string, options: WorkerCommandOptions, command: Command) => {
      const g = globalOptions(command);
      const { loadDefinitions } = await import('./load-definitions.js');
      const { describeDatabase, openEngine, resolveTarget } = await import('./open-engine.js');
      const target = resolveTarget(g);
      const definitions = await loadDefinitions(modulePath, process.cwd());
      // Listen for signals before anything starts, so a SIGTERM during start-up still stops gracefully.
      const signals = stopSignals(output);
      const engine = await openEngine(target, 'worker').catch((error: unknown) => {
        signals.dispose();
        throw error;
      });
      let worker: Worker;
      try {
        worker = engine.worker({
          workflows: definitions.workflows,
          activities: definitions.activities,
          ...(options.queue ? { queues: options.queue } : {}),
          ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
          ...(options.prefetch !== undefined ? { prefetch: options.prefetch } : {}),
          ...(options.workerId !== undefined ? { workerId: options.workerId } : {}),
        });
        reportEvents(worker, output, g.json);
        await worker.start();
      } catch (error) {
        signals.dispose();
        await engine.close({ graceMs: 0 });
        throw error;
      }

      const o = worker.options;
      const names = (m: ReadonlyMap<string, unknown>) => [...m.keys()].join(', ') || 'none';
      if (g.json) {
        output.printJson(
          {
            at: new Date().toISOString(),
            event: 'worker:started',
            workerId: worker.workerId,
            workflows: [...o.workflows.keys()],
            activities: [...o.activities.keys()],
            queues: o.queues,
            concurrency: o.concurrency,
            prefetch: o.prefetch,
          },
          true,
        );
      } else {
        const t = output.terminal;
        const fit = (text: string) => truncate(text, t.width - 14, 'middle');
        output.line(`${paint(t, 'green', 'worker started')}  ${worker.workerId}`);
        output.line(`  database    ${fit(`${describeDatabase(target)} · schema ${target.schema}`)}`);
        output.line(`  workflows   ${fit(names(o.workflows))}`);
        output.line(`  activities  ${fit(names(o.activities))}`);
        output.line(
          `  queues      ${fit(`${o.queues.join(', ')} · concurrency ${o.concurrency} · prefetch ${o.prefetch}`)}`,
        );
        output.line(paint(t, 'dim', '  Ctrl-C or SIGTERM stops it gracefully'));
      }

      const signal = await signals.first;
      const graceMs = options.graceMs ?? o.shutdownGraceMs;
      if (g.json) output.printJson({ at: new Date().toISOString(), event: 'worker:stopping', signal }, true);
      else output.line(`${signal}: stopping (running attempts may finish for ${graceMs} ms)…`);
      await worker.stop({ graceMs });
      await engine.close({ graceMs });
      signals.dispose();
      if (g.json) output.printJson({ at: new Date().toISOString(), event: 'worker:stopped' }, true);
      else output.line('worker stopped');
      // The served module may hold handles of its own (pools, timers); they must not keep a stopped worker alive.
      setTimeout(() => process.exit(process.exitCode ?? 0), 2_000).unref();
    });
}
