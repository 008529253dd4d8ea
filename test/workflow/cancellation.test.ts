import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CancelledFailure,
  ChildWorkflowFailure,
  defineActivity,
  defineSignal,
  type AbortReason,
  type AttemptAbortedError,
} from '@palisade/sdk';
import type { Engine, Worker } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, deferred, runOf, stepsOf, stepsReach } from './workflow-rows.js';
import { cancelWhileTurnRuns } from './cancel-race.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';

const nudge = defineSignal({ name: 'nudge', payload: z.object({ n: z.number() }) });

const HEARTBEAT_MS = 500;

function fixture() {
  const executions: string[] = [];
  const started = deferred();
  const aborted = deferred<{ reason: AbortReason | undefined; afterMs: number }>();
  let cancelSentAt = 0;
  const long = noInputActivity(
    'long',
    z.string(),
    async (ctx) => {
      executions.push('long');
      started.resolve();
      // Runs until told to stop; it never heartbeats itself: the worker's heartbeat carries the cancel.
      await new Promise<void>((resolve) =>
        ctx.signal.addEventListener('abort', () => resolve(), { once: true }),
      );
      const reason = (ctx.signal.reason as AttemptAbortedError | undefined)?.reason;
      aborted.resolve({ reason, afterMs: performance.now() - cancelSentAt });
      throw ctx.signal.reason;
    },
    { leaseMs: '3s' },
  );
  const compensate = defineActivity({
    name: 'compensate',
    input: z.object({ why: z.string() }),
    output: z.string(),
    run({ why }) {
      executions.push(`compensate:${why}`);
      return Promise.resolve('undone');
    },
  });
  const seen: string[] = [];
  const careful = noInputWorkflow('careful', z.string(), async (ctx) => {
    try {
      return await ctx.run(long, {});
    } catch (error) {
      seen.push(`${(error as Error).constructor.name}:${(error as { code?: string }).code}`);
      if (error instanceof CancelledFailure) await ctx.run(compensate, { why: 'catch' });
      throw error;
    }
  });
  const sleepy = noInputWorkflow('sleepy', z.string(), async (ctx) => {
    try {
      await ctx.sleep('1h');
      return 'woke';
    } finally {
      await ctx.run(compensate, { why: 'finally' });
    }
  });
  return {
    executions,
    started,
    aborted,
    seen,
    long,
    compensate,
    careful,
    sleepy,
    markCancelSent: () => (cancelSentAt = performance.now()),
  };
}

/** A started worker of `careful` and its activities, heartbeating every {@link HEARTBEAT_MS}. */
function startCarefulWorker(engine: Engine, f: ReturnType<typeof fixture>) {
  return startWorker(engine, [f.careful, f.long, f.compensate], {
    heartbeatIntervalMs: HEARTBEAT_MS,
    heartbeatTimeoutMs: HEARTBEAT_MS,
    pollIntervalMs: 50,
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`cancellation on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('cancels a running activity at its next heartbeat; the workflow compensates and the run ends cancelled', async () => {
      const f = fixture();
      const engine = await target.engine();
      await startCarefulWorker(engine, f);
      const handle = await engine.client.start(f.careful, {});
      await f.started.promise;
      f.markCancelSent();
      expect(await handle.cancel('customer asked')).toBe('running');
      const { reason, afterMs } = await f.aborted.promise;
      expect(reason).toBe('cancelled');
      expect(afterMs).toBeLessThan(HEARTBEAT_MS + 2_000);

      const error = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CancelledFailure);
      expect((error as CancelledFailure).message).toContain('customer asked');
      expect(f.seen).toContain('CancelledFailure:CANCELLED');
      expect(new Set(f.seen)).toEqual(new Set(['CancelledFailure:CANCELLED']));
      expect(f.executions).toEqual(['long', 'compensate:catch']);
      expect((await runOf(engine, handle.runId)).status).toBe('cancelled');
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.name, s.status])).toEqual([
        ['long', 'cancelled'],
        ['compensate', 'completed'],
      ]);
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.filter((a) => a.kind === 'activity').map((a) => [a.seq, a.outcome])).toEqual([
        [0, 'cancelled'],
        [1, 'completed'],
      ]);
      const described = (await handle.describe()).events;
      const events = described.map((e) => e.type);
      expect(events).toContain('run:cancel-requested');
      expect(events.filter((t) => t.startsWith('run:')).at(-1)).toBe('run:cancelled');
      // The cancel ended \`long\` under its holder, whose next heartbeat was refused saying so.
      expect(described.filter((e) => e.type === 'attempt:stale-rejected').map((e) => e.data)).toEqual([
        expect.objectContaining({ operation: 'heartbeat', reason: 'cancelled' }),
      ]);
      // Cancelling again is a no-op that reports the final status.
      expect(await handle.cancel('again')).toBe('cancelled');
    });

    it('cancels a sleeping run without time travel; its finally block compensates', async () => {
      const f = fixture();
      const engine = await target.engine();
      const worker = await startWorker(engine, [f.sleepy, f.compensate], { pollIntervalMs: 50 });
      const handle = await engine.client.start(f.sleepy, {});
      await stepsReach([worker], engine, handle.runId, (steps) => steps[0]?.kind === 'timer', 'asleep');
      await handle.cancel('not needed');
      const error = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CancelledFailure);
      expect(f.executions).toEqual(['compensate:finally']);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.kind, s.status])).toEqual([
        ['timer', 'cancelled'],
        ['activity', 'completed'],
      ]);
      expect((await runOf(engine, handle.runId)).status).toBe('cancelled');
    });

    it('does not lose a cancel requested while a turn that schedules the next step is in flight', async () => {
      const engine = await target.engine();
      const { runId, worker, error, cancelAnswer, executions } = await cancelWhileTurnRuns(engine);
      expect(cancelAnswer).toBe('running');
      expect(error).toBeInstanceOf(CancelledFailure);
      expect(executions).toEqual(['first', 'undo']);
      const steps = await stepsOf(engine, runId);
      expect(steps.map((s) => [s.name, s.status])).toEqual([
        ['first', 'completed'],
        ['second', 'cancelled'],
        ['undo', 'completed'],
      ]);
      if (driver === 'pglite') {
        // One connection, statements in order: the cancel committed first, so the racing turn was handed back.
        const turns = (await attemptsOf(engine, runId)).filter((a) => a.kind === 'turn');
        expect(turns.map((a) => a.outcome)).toContain('released');
      }
      await worker.stop();
    });

    it('ends a run that no worker has picked up yet at its cancel; a worker started later runs none of it', async () => {
      const f = fixture();
      const engine = await target.engine();
      const handle = await engine.client.start(f.careful, {});
      // A signal it received before: no wait will ever take it, and the end says so, as every run's end does.
      const signalId = await handle.signal(nudge, { n: 1 });
      // No turn has begun: nothing of its code ran, so nothing waits for a worker to clean up.
      expect(await handle.cancel('changed my mind')).toBe('cancelled');
      expect((await runOf(engine, handle.runId)).status).toBe('cancelled');
      const { signals } = await handle.describe();
      expect(signals.map((s) => [s.id, s.undelivered])).toEqual([
        [signalId, { reason: 'run-ended', status: 'cancelled' }],
      ]);
      await expect(handle.result({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(CancelledFailure);
      await startCarefulWorker(engine, f);
      const error = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CancelledFailure);
      expect(f.executions.filter((e) => e === 'long')).toEqual([]);
      expect((await runOf(engine, handle.runId)).status).toBe('cancelled');
      expect(await stepsOf(engine, handle.runId)).toEqual([]);
    });

    describe('a child of a workflow no worker registers', () => {
      /** Registered by no worker of these tests. */
      const unserved = noInputWorkflow('unserved-child', z.string(), () => Promise.resolve('never'));
      const awaiting = noInputWorkflow('awaiting-parent', z.string(), async (ctx) => {
        try {
          return await ctx.runChild(unserved, {});
        } catch (error) {
          if (error instanceof ChildWorkflowFailure) return `child ended: ${error.failure.type}`;
          throw error;
        }
      });
      const leaving = noInputWorkflow('leaving-parent', z.string(), async (ctx) => {
        ctx.runChild(unserved, {}).catch(() => undefined);
        await ctx.sleep(10); // a turn later: the child has started
        return 'left';
      });

      /** A worker that registers the parents only. */
      const parentOnly = (engine: Engine) => startWorker(engine, [awaiting, leaving], { pollIntervalMs: 50 });
      /** The first child run of `parentId`, once its parent's turn started it. */
      async function childOf(engine: Engine, worker: Worker, parentId: string): Promise<string> {
        let childId: string | undefined;
        await checkOnEvents(
          [worker],
          async () => {
            childId = (await engine.client.getHandle(parentId).describe()).children[0]?.id;
            return childId !== undefined;
          },
          'the child run to start',
        );
        return childId!;
      }

      it('ends it when it is cancelled directly, and its parent sees the failure', async () => {
        const engine = await target.engine();
        const worker = await parentOnly(engine);
        const parent = await engine.client.start(awaiting, {});
        const childId = await childOf(engine, worker, parent.runId);
        expect(await engine.client.getHandle(childId).cancel('no one serves it')).toBe('cancelled');
        expect((await runOf(engine, childId)).status).toBe('cancelled');
        await expect(parent.result({ timeoutMs: 15_000 })).resolves.toBe('child ended: CancelledFailure');
        await worker.stop();
      });

      it('ends it when its parent is cancelled', async () => {
        const engine = await target.engine();
        const worker = await parentOnly(engine);
        const parent = await engine.client.start(awaiting, {});
        const childId = await childOf(engine, worker, parent.runId);
        await parent.cancel('the parent is cancelled');
        expect((await runOf(engine, childId)).status).toBe('cancelled');
        await expect(parent.result({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(CancelledFailure);
        await expect(engine.client.getHandle(childId).result({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(
          CancelledFailure,
        );
        await worker.stop();
      });

      it('ends it when its parent ends without awaiting it', async () => {
        const engine = await target.engine();
        const worker = await parentOnly(engine);
        const parent = await engine.client.start(leaving, {});
        await expect(parent.result({ timeoutMs: 15_000 })).resolves.toBe('left');
        const [c] = (await parent.describe()).children;
        expect(c).toBeDefined();
        await expect(engine.client.getHandle(c!.id).result({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(
          CancelledFailure,
        );
        expect((await runOf(engine, c!.id)).status).toBe('cancelled');
        await worker.stop();
      });
    });
  });
}
