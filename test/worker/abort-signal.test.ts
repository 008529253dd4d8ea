import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AttemptAbortedError, LeaseLostError, type ActivityContext, type ActivityInfo } from '@palisade/sdk';
import type { Engine, Worker } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget, type EngineTarget } from '../support/engine.js';
import {
  aborted,
  attemptsOf,
  eventsOf,
  gate,
  makeFirstGrantsStale,
  settle,
  stepOf,
  workerEvent,
  type Gate,
} from './helpers.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputActivity } from '../fixtures/no-input.js';

/**
 * An activity whose first attempt waits for its signal, records the reason and throws; later attempts return
 * their attempt number.
 */
function firstAttemptAwaitsAbort() {
  const reasons: unknown[] = [];
  const job = noInputActivity('job', z.object({ attempt: z.number() }), async (ctx) => {
    if (ctx.info.attempt === 1) {
      reasons.push(await aborted(ctx.signal));
      throw new Error('stopped');
    }
    return { attempt: ctx.info.attempt };
  });
  return { job, reasons };
}

/**
 * Start `worker`, enqueue `job`, wait for its first attempt and one renewing heartbeat, then move the DB clock
 * past the lease and wait for the heartbeat that finds it expired.
 */
async function expireFirstAttempt(
  engine: Engine,
  worker: Worker,
  job: ReturnType<typeof firstAttemptAwaitsAbort>['job'],
) {
  await worker.start();
  const started = workerEvent(worker, 'attempt:started');
  const handle = await engine.client.enqueue(job, {});
  const { attempt: ref } = await started;
  await workerEvent(worker, 'heartbeat:sent', (e) => e.renewed === 1);
  const rejected = workerEvent(worker, 'attempt:stale-rejected');
  await advanceClock(engine, 31_000);
  const { error } = await rejected;
  return { handle, ref, error };
}

/** A fresh engine with {@link firstAttemptAwaitsAbort}'s job and a worker (not started) heartbeating every 100 ms. */
async function heartbeatingJob(target: EngineTarget) {
  const { job, reasons } = firstAttemptAwaitsAbort();
  const engine = await target.engine();
  const worker = workerFor(engine, [job], { concurrency: 1, pollIntervalMs: 20, heartbeatIntervalMs: 100 });
  return { job, reasons, engine, worker };
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`abort signal, local deadline and activity context on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('fires lease-lost and rejects ctx.heartbeat once another worker took over the expired step', async () => {
      const zombie: Gate<{ heartbeat: unknown; reason: unknown; again: unknown }> = gate();
      const resume = gate();
      const job = noInputActivity('job', z.object({ attempt: z.number() }), async (ctx) => {
        if (ctx.info.attempt > 1) return { attempt: ctx.info.attempt };
        await resume.promise;
        const heartbeat = await settle(ctx.heartbeat({ page: 2 }));
        const reason: unknown = ctx.signal.reason;
        const again = await settle(ctx.fencedTransaction(() => Promise.resolve(1)));
        zombie.open({ heartbeat, reason, again });
        return { attempt: ctx.info.attempt };
      });
      const engine = await target.engine();
      // One slot each, so neither worker reclaims the step it is itself running.
      const first = await startWorker(engine, [job], { concurrency: 1, pollIntervalMs: 20, workerId: 'a' });
      const started = workerEvent(first, 'attempt:started');
      const handle = await engine.client.enqueue(job, {});
      const { attempt: stale } = await started;

      await advanceClock(engine, 31_000); // past the 30 s lease, by the DB clock only
      await startWorker(engine, [job], { concurrency: 1, pollIntervalMs: 20, workerId: 'b' });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      const current = (await attemptsOf(engine, handle.runId))[1]!;

      const lost = workerEvent(first, 'attempt:aborted');
      resume.open();
      const { heartbeat, reason, again } = await zombie.promise;
      expect((await lost).reason).toBe('lease-lost');

      const rejection = (heartbeat as { error: unknown }).error;
      expect(rejection).toBeInstanceOf(LeaseLostError);
      expect(rejection).toMatchObject({
        code: 'LEASE_LOST',
        operation: 'heartbeat',
        reason: 'superseded',
        staleToken: stale.token,
        currentToken: BigInt(current.token),
      });
      expect(reason).toBeInstanceOf(AttemptAbortedError);
      expect(reason).toMatchObject({ reason: 'lease-lost', cause: rejection });
      // Poisoned: the next call throws the same error without another round trip.
      expect(again).toEqual({ ok: false, error: rejection });

      const events = await eventsOf(engine, handle.runId);
      const rejected = events.filter((e) => e.type === 'attempt:stale-rejected');
      expect(rejected).toHaveLength(1);
      expect(rejected[0]).toMatchObject({
        token: stale.token.toString(),
        data: {
          operation: 'heartbeat',
          reason: 'superseded',
          staleToken: stale.token.toString(),
          currentToken: current.token,
        },
      });
      const step = await stepOf(engine, handle.runId);
      expect(step).toMatchObject({ status: 'completed', output: { attempt: 2 }, token: current.token });
      expect(step.heartbeat_details).toBeNull(); // the stale heartbeat stored nothing
      expect((await attemptsOf(engine, handle.runId)).map((a) => [a.worker_id, a.outcome])).toEqual([
        ['a', 'lease_expired'],
        ['b', 'completed'],
      ]);
    });

    it('fires lease-lost from a background heartbeat once the lease expired by DB time, even with no new owner', async () => {
      const { job, reasons, engine, worker } = await heartbeatingJob(target);
      const { handle, ref, error } = await expireFirstAttempt(engine, worker, job);
      // Expiry is final: the heartbeat does not revive the lease although nobody reclaimed it.
      expect(error).toMatchObject({ code: 'LEASE_LOST', reason: 'expired', currentToken: ref.token });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      expect(reasons).toHaveLength(1);
      expect(reasons[0]).toMatchObject({ reason: 'lease-lost', cause: error });
      expect((await attemptsOf(engine, handle.runId)).map((a) => [a.attempt, a.outcome])).toEqual([
        // Refused after its lease ran out, the attempt still held the step: the claim that took it over ended it.
        [1, 'lease_expired'],
        [2, 'completed'],
      ]);
      const events = await eventsOf(engine, handle.runId);
      expect(events.find((e) => e.type === 'attempt:stale-rejected')?.data).toMatchObject({
        operation: 'heartbeat',
        reason: 'expired',
      });
    });

    it('fires the signal although a listener of the worker events throws', async () => {
      // Worker events are emitted in the middle of the engine's own work: `attempt:stale-rejected` and
      // `attempt:aborted` just before the AbortSignal fires. A listener's bug must not keep the zombie running.
      const { job, reasons, engine, worker } = await heartbeatingJob(target);
      for (const event of ['attempt:stale-rejected', 'attempt:aborted', 'heartbeat:sent'] as const) {
        worker.events.on(event, () => {
          throw new Error(`listener of ${event} fails`);
        });
      }
      const { handle, error } = await expireFirstAttempt(engine, worker, job);
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      expect(reasons).toEqual([expect.objectContaining({ reason: 'lease-lost', cause: error })]);
    });

    it('acts on the late reply of a timed-out heartbeat: the entry it rejected is not sent again and rejected twice', async () => {
      const { job, reasons } = firstAttemptAwaitsAbort();
      const engine = await target.engine();
      const n = engine.names;
      const worker = await startWorker(engine, [job], {
        concurrency: 1,
        pollIntervalMs: 20,
        heartbeatIntervalMs: 200,
        heartbeatTimeoutMs: 50,
      });
      const started = workerEvent(worker, 'attempt:started');
      const handle = await engine.client.enqueue(job, {});
      const { attempt: ref } = await started;
      await workerEvent(worker, 'heartbeat:sent', (e) => e.renewed === 1);

      const rejections: unknown[] = [];
      worker.events.on('attempt:stale-rejected', ({ error }) => rejections.push(error));
      const timedOut = workerEvent(worker, 'heartbeat:failed');
      // Hold the step (on PGlite: the one connection) in a transaction until a heartbeat waiting behind it has
      // timed out at the client, then move the DB clock past the lease in that transaction: the waiting
      // heartbeat runs once it commits, is rejected (expired) and records the rejection, after its client gave up.
      await engine.database.transaction(async (tx) => {
        await tx.rows(sql`SELECT 1 FROM ${n.steps} WHERE id = ${ref.stepId}::uuid FOR UPDATE`);
        await timedOut;
        await advanceClock({ names: n, database: tx }, 31_000);
      });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      expect(reasons).toHaveLength(1);
      expect(reasons[0]).toMatchObject({ reason: 'lease-lost', cause: { reason: 'expired' } });
      expect(rejections).toHaveLength(1);
      const events = await eventsOf(engine, handle.runId);
      expect(events.filter((e) => e.type === 'attempt:stale-rejected').map((e) => e.data)).toEqual([
        expect.objectContaining({ operation: 'heartbeat', reason: 'expired' }),
      ]);
    });

    it('fires deadline at the start-to-close timeout, records the attempt timed_out and retries it', async () => {
      const reasons: unknown[] = [];
      const slow = noInputActivity(
        'slow',
        z.object({ attempt: z.number() }),
        async (ctx) => {
          if (ctx.info.attempt === 1) {
            reasons.push(await aborted(ctx.signal));
            throw ctx.signal.reason;
          }
          return { attempt: ctx.info.attempt };
        },
        {
          startToCloseTimeoutMs: 3_000,
          retry: { initialIntervalMs: 60_000, jitter: 0, maximumAttempts: 3 },
        },
      );
      const engine = await target.engine();
      // The deadline fires a margin M before the database's; the default M (3 s, a tenth of the 30 s lease)
      // would leave no time inside a 3 s deadline. 1 s leaves the failure write ample time even on a busy host.
      const worker = await startWorker(engine, [slow], { pollIntervalMs: 20, leaseSafetyMarginMs: 1_000 });
      const failed = workerEvent(worker, 'attempt:failed');
      const handle = await engine.client.enqueue(slow, {});

      const { failure, retry } = await failed;
      expect(reasons).toHaveLength(1);
      expect(reasons[0]).toMatchObject({ code: 'ATTEMPT_ABORTED', reason: 'deadline' });
      expect(failure).toMatchObject({ type: 'StartToCloseTimeout', nonRetryable: false });
      expect(retry).toBe(true);
      // Recorded by its owner (fenced, inside the lease), so with its error and the retry's backoff.
      const [first] = await attemptsOf(engine, handle.runId);
      expect(first).toMatchObject({
        attempt: 1,
        outcome: 'timed_out',
        error: { type: 'StartToCloseTimeout' },
      });
      const ranMs = first!.ended_at_ms! - first!.claimed_at_ms;
      // About stc − M = 2 s (less the claim's round trip: the local deadline counts from when it was sent), and
      // inside the 3 s the database allows.
      expect(ranMs).toBeGreaterThanOrEqual(1_000);
      expect(ranMs).toBeLessThan(3_000);
      const step = await stepOf(engine, handle.runId);
      expect(step).toMatchObject({ status: 'scheduled', attempt: 1 });
      expect(Math.abs(step.next_run_at_ms! - first!.ended_at_ms! - 60_000)).toBeLessThan(100);

      await advanceClock(engine, 61_000);
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      expect((await attemptsOf(engine, handle.runId)).map((a) => [a.attempt, a.outcome])).toEqual([
        [1, 'timed_out'],
        [2, 'completed'],
      ]);
    });

    it('releases a grant that arrives with too little lease left unstarted, without charging an attempt', async () => {
      const infos: ActivityInfo[] = [];
      const job = emptyActivity('job', {
        run(_input, ctx) {
          infos.push(ctx.info);
          return Promise.resolve({});
        },
      });
      const engine = await target.engine();
      await makeFirstGrantsStale(engine, 25_000); // 5 s of a 30 s lease left: below the default half
      const worker = workerFor(engine, [job], { pollIntervalMs: 20 });
      const started: number[] = [];
      worker.events.on('attempt:started', ({ attempt }) => started.push(attempt.attempt));
      await worker.start();
      const released = workerEvent(worker, 'attempt:released');
      const handle = await engine.client.enqueue(job, {});

      const { why, attempt: stale } = await released;
      expect(why).toBe('stale-grant');
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({});
      // The stale grant never ran; the next claim runs it as attempt 1 of epoch 2.
      expect(started).toEqual([1]);
      expect(infos.map((i) => [i.attempt, i.epoch])).toEqual([[1, 2]]);
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
        [1, 1, 'released'],
        [1, 2, 'completed'],
      ]);
      expect(attempts[0]!.token).toBe(stale.token.toString());
      const events = await eventsOf(engine, handle.runId);
      expect(events.find((e) => e.type === 'attempt:released')?.data).toEqual({ why: 'stale-grant' });
      expect(await stepOf(engine, handle.runId)).toMatchObject({ status: 'completed', attempt: 1, epoch: 2 });
    });

    it('runs a step whose start-to-close timeout is shorter than its lease instead of releasing it forever', async () => {
      let releases = 0;
      const quick = noInputActivity(
        'quick',
        z.object({ attempt: z.number(), epoch: z.number() }),
        (ctx) => {
          return Promise.resolve({ attempt: ctx.info.attempt, epoch: ctx.info.epoch });
        },
        {
          startToCloseTimeoutMs: 5_000, // the claim caps the 30 s lease at 5 s
        },
      );
      const engine = await target.engine();
      const worker = workerFor(engine, [quick], { pollIntervalMs: 20 });
      // Were every grant judged stale, the worker would release and reclaim it in a tight loop (starving PGlite's
      // event loop): stop after a few so that the test fails instead of hanging.
      worker.events.on('attempt:released', () => {
        if (++releases === 3) void worker.stop({ graceMs: 0 });
      });
      await worker.start();
      const handle = await engine.client.enqueue(quick, {});
      await expect(handle.result({ timeoutMs: 5_000 })).resolves.toEqual({ attempt: 1, epoch: 1 });
      expect(releases).toBe(0);
    });

    it('refuses a context used after its attempt ended, and keeps refusing it the same way', async () => {
      const engine = await target.engine();
      const kept: ActivityContext[] = [];
      const job = emptyActivity('job', {
        run(_input, ctx: ActivityContext) {
          kept.push(ctx);
          return Promise.resolve({});
        },
      });
      await startWorker(engine, [job]);
      await (await engine.client.enqueue(job, {})).result({ timeoutMs: 30_000 });
      const [ctx] = kept;
      const late: object = {
        code: 'ATTEMPT_ABORTED',
        message: expect.stringMatching(/has ended; its context can no longer be used/) as unknown,
      };
      await expect(ctx!.heartbeat()).rejects.toMatchObject(late);
      await expect(ctx!.fencedTransaction(() => Promise.resolve(1))).rejects.toMatchObject(late);
      const first = await ctx!.heartbeat().catch((e: unknown) => e);
      expect(await ctx!.heartbeat().catch((e: unknown) => e)).toBe(first); // one poison, not one per call
    });

    it('tells the attempt who it is: attempt, epoch, fencing scope and the token stored on the step', async () => {
      const seen: { info: ActivityInfo; stepToken: string | null }[] = [];
      const engine = await target.engine();
      const job = emptyActivity('job', {
        queue: 'jobs',
        leaseMs: 20_000,
        startToCloseTimeoutMs: 60_000,
        async run(_input, ctx: ActivityContext) {
          const step = await stepOf(engine, ctx.info.runId);
          seen.push({ info: ctx.info, stepToken: step.token });
          return {};
        },
      });
      await startWorker(engine, [job], {
        queues: ['jobs'],
        pollIntervalMs: 20,
        workerId: 'w-1',
      });
      const handle = await engine.client.enqueue(job, {});
      await handle.result({ timeoutMs: 10_000 });

      const step = await stepOf(engine, handle.runId);
      expect(seen).toHaveLength(1);
      const { info, stepToken } = seen[0]!;
      expect(info).toMatchObject({
        runId: handle.runId,
        stepId: step.id,
        activityName: 'job',
        seq: 0,
        attempt: 1,
        epoch: 1,
        queue: 'jobs',
        workerId: 'w-1',
        leaseMs: 20_000,
        startToCloseTimeoutMs: 60_000,
        heartbeatDetails: undefined,
      });
      // A standalone run is its own unit of work (invariant 13).
      expect(info.fencing.scope).toBe(`run:${handle.runId}`);
      expect(typeof info.fencing.token).toBe('bigint');
      expect(info.fencing.token.toString()).toBe(stepToken);
      expect(info.fencing.token.toString()).toBe(step.token);
      expect(Object.isFrozen(info)).toBe(true);
    });

    it('stores heartbeat details and hands them to the next attempt as ctx.info.heartbeatDetails', async () => {
      const details: unknown[] = [];
      const engine = await target.engine();
      const stored: unknown[] = [];
      const job = noInputActivity(
        'job',
        z.object({ resumedFrom: z.number() }),
        async (ctx) => {
          details.push(ctx.info.heartbeatDetails);
          if (ctx.info.attempt === 1) {
            await ctx.heartbeat({ page: 3, cursor: 'c-3' });
            stored.push((await stepOf(engine, ctx.info.runId)).heartbeat_details);
            throw new Error('crashed on page 4');
          }
          const last = ctx.info.heartbeatDetails as { page: number };
          return { resumedFrom: last.page };
        },
        { retry: { initialIntervalMs: 60_000, jitter: 0, maximumAttempts: 3 } },
      );
      const worker = workerFor(engine, [job], { pollIntervalMs: 20 });
      worker.events.on('attempt:failed', () => void advanceClock(engine, 61_000));
      await worker.start();
      const handle = await engine.client.enqueue(job, {});
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ resumedFrom: 3 });
      expect(stored).toEqual([{ page: 3, cursor: 'c-3' }]); // persisted by the time heartbeat() resolved
      expect(details).toEqual([undefined, { page: 3, cursor: 'c-3' }]);
      expect((await stepOf(engine, handle.runId)).heartbeat_details).toEqual({ page: 3, cursor: 'c-3' });
    });
  });
}
