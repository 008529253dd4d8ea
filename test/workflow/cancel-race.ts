/**
 * A cancel that commits while the turn after a workflow's first step runs, before that turn commits: the code of
 * `racing` requests it itself (once), and the fault point `turn:before-commit` waits for the request to commit.
 * `racing` runs `first`, then `second`, and on `second`'s failure runs `undo` and rethrows.
 */
import { AsyncResource } from 'node:async_hooks';
import { onTestFinished } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import type { Engine, Worker, WorkerOptions } from '@palisade/engine';
import { setFaultHook } from '@palisade/engine/testing';

export interface CancelRace {
  readonly runId: string;
  readonly worker: Worker;
  /** What `handle.result()` rejected (or resolved) with. */
  readonly error: unknown;
  /** The run's status as the cancel request answered it. */
  readonly cancelAnswer: string;
  /** The activities whose code ran, in order. */
  readonly executions: readonly string[];
}

/**
 * Run the race on a worker of `engine` with `options` added (started here; the caller stops it). `beforeStart`
 * may subscribe to the worker's events first.
 */
export async function cancelWhileTurnRuns(
  engine: Engine,
  options: Partial<WorkerOptions> = {},
  beforeStart: (worker: Worker) => void = () => undefined,
): Promise<CancelRace> {
  const executions: string[] = [];
  const act = (name: string) =>
    defineActivity({
      name,
      input: z.object({}),
      output: z.string(),
      run: () => {
        executions.push(name);
        return Promise.resolve(name);
      },
    });
  const [first, second, undo] = [act('first'), act('second'), act('undo')];
  let runId = '';
  let fired = false;
  let cancelRequest: Promise<string> | undefined;
  // Runs outside the turn's async context, so the engine does not take the request for workflow I/O.
  const fireCancel = AsyncResource.bind(() => {
    cancelRequest = engine.client.getHandle(runId).cancel('raced');
  });
  const racing = defineWorkflow({
    name: 'racing',
    input: z.object({}),
    output: z.string(),
    async run(_input, ctx) {
      await ctx.run(first, {});
      if (!fired) {
        fired = true;
        fireCancel(); // the request commits while this turn runs (before it commits)
      }
      try {
        return await ctx.run(second, {});
      } catch (error) {
        await ctx.run(undo, {});
        throw error;
      }
    },
  });
  // The request commits before the turn that ran into it commits (not left to the event loop's timing).
  setFaultHook('turn:before-commit', async () => {
    await cancelRequest;
  });
  onTestFinished(() => setFaultHook('turn:before-commit', undefined));
  const worker = engine.worker({
    workflows: [racing],
    activities: [first, second, undo],
    pollIntervalMs: 50,
    ...options,
  });
  beforeStart(worker);
  await worker.start();
  const handle = await engine.client.start(racing, {});
  runId = handle.runId;
  const error = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
  return { runId, worker, error, cancelAnswer: (await cancelRequest) ?? 'never requested', executions };
}
