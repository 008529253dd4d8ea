import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AttemptAbortedError, defineActivity, type ActivityContext } from '@palisade/sdk';
import { advanceClock, setFaultHook } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import {
  aborted,
  attemptsOf,
  dbNowMs,
  eventsOf,
  gate,
  settle,
  stepOf,
  workerEvent,
  type Gate,
} from './helpers.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputActivity } from '../fixtures/no-input.js';

/** Resource kinds Node reports as keeping the event loop alive, counted by kind. */
function activeResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}

/** Kinds of which there are more now than in `baseline` (unrelated resources may have ended meanwhile). */
function growthSince(baseline: Record<string, number>): Record<string, number> {
  const growth: Record<string, number> = {};
  for (const [kind, count] of Object.entries(activeResources())) {
    if (count > (baseline[kind] ?? 0)) growth[kind] = count - (baseline[kind] ?? 0);
  }
  return growth;
}

/**
 * Record every timer created through the global setTimeout until `restore()`, with its creation stack, and
 * forget it once it fires or is cleared: what is left is pending. Unlike `process.getActiveResourcesInfo()`
 * this also sees unref'd timers.
 */
function trackTimers(): { pendingFrom(path: string): string[]; restore(): void } {
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  const pending = new Map<unknown, string>();
  const tracked = (fn: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const stack = new Error('timer created').stack ?? '';
    const handle = realSet(() => {
      pending.delete(handle);
      fn(...args);
    }, ms);
    pending.set(handle, stack);
    return handle;
  };
  const trackedClear: typeof clearTimeout = (handle) => {
    pending.delete(handle);
    realClear(handle);
  };
  // Object.assign keeps setTimeout's extra properties (its util.promisify.custom variant).
  Object.assign(globalThis, { setTimeout: Object.assign(tracked, realSet), clearTimeout: trackedClear });
  return {
    pendingFrom: (path) => [...pending.values()].filter((stack) => stack.includes(path)),
    restore() {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
    },
  };
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`graceful worker stop on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('lets an attempt that ends within graceMs complete and claims nothing once stopping', async () => {
      const finish = gate();
      const job = defineActivity({
        name: 'job',
        input: z.object({ n: z.number() }),
        output: z.object({ n: z.number() }),
        async run(input) {
          if (input.n === 1) await finish.promise;
          return input;
        },
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [job], { concurrency: 1, pollIntervalMs: 20 });
      const aborts: string[] = [];
      worker.events.on('attempt:aborted', ({ reason }) => aborts.push(reason));
      await worker.start();
      const started = workerEvent(worker, 'attempt:started');
      const first = await engine.client.enqueue(job, { n: 1 });
      await started;
      const second = await engine.client.enqueue(job, { n: 2 }); // waits for the one slot

      const stopping = worker.stop({ graceMs: 10_000 });
      finish.open();
      await stopping;

      await expect(first.result({ timeoutMs: 1_000 })).resolves.toEqual({ n: 1 });
      expect(aborts).toEqual([]);
      expect((await attemptsOf(engine, first.runId)).map((a) => a.outcome)).toEqual(['completed']);
      expect(await stepOf(engine, second.runId)).toMatchObject({ status: 'scheduled', attempt: 0, epoch: 0 });
      expect(await attemptsOf(engine, second.runId)).toEqual([]);
    });

    it('releases unstarted, uncharged, what a claim in flight when stop() began returns', async () => {
      const ran: number[] = [];
      const job = defineActivity({
        name: 'job',
        input: z.object({ n: z.number() }),
        output: z.object({ n: z.number() }),
        run(input) {
          ran.push(input.n);
          return Promise.resolve(input);
        },
      });
      const engine = await target.engine();
      const claimHeld = gate();
      const releaseClaim = gate();
      setFaultHook('claim:before-commit', async () => {
        claimHeld.open();
        await releaseClaim.promise;
      });
      try {
        const worker = workerFor(engine, [job], { pollIntervalMs: 20, workerId: 'stopping' });
        const events: string[] = [];
        worker.events.on('attempt:started', () => events.push('started'));
        worker.events.on('attempt:released', ({ why }) => events.push(`released:${why}`));
        await worker.start();
        const handle = await engine.client.enqueue(job, { n: 1 });
        await claimHeld.promise; // the claim has taken the step and not yet committed

        const stopped = worker.stop({ graceMs: 10_000 });
        setFaultHook('claim:before-commit', undefined);
        releaseClaim.open();
        await stopped;

        expect(ran).toEqual([]);
        expect(events).toEqual(['released:shutdown']);
        expect(await stepOf(engine, handle.runId)).toMatchObject({
          status: 'scheduled',
          attempt: 0,
          epoch: 1,
        });
        expect((await attemptsOf(engine, handle.runId)).map((a) => [a.worker_id, a.outcome])).toEqual([
          ['stopping', 'released'],
        ]);

        const next = await startWorker(engine, [job], { pollIntervalMs: 20, workerId: 'next' });
        await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ n: 1 });
        await next.stop();
        expect(ran).toEqual([1]);
      } finally {
        setFaultHook('claim:before-commit', undefined);
        releaseClaim.open();
      }
    });

    it('aborts a cooperative attempt with reason shutdown and releases it, so another worker claims it at once', async () => {
      const reasons: unknown[] = [];
      const patient = noInputActivity(
        'patient',
        z.object({ attempt: z.number(), epoch: z.number(), workerId: z.string() }),
        async (ctx) => {
          if (ctx.info.epoch === 1) {
            reasons.push(await aborted(ctx.signal));
            throw ctx.signal.reason;
          }
          return { attempt: ctx.info.attempt, epoch: ctx.info.epoch, workerId: ctx.info.workerId };
        },
      );
      const engine = await target.engine();
      const first = await startWorker(engine, [patient], { pollIntervalMs: 20, workerId: 'first' });
      const started = workerEvent(first, 'attempt:started');
      const handle = await engine.client.enqueue(patient, {});
      const { attempt: ref } = await started;
      const released = workerEvent(first, 'attempt:released');

      await first.stop({ graceMs: 50 });

      expect((await released).why).toBe('shutdown');
      expect(reasons).toHaveLength(1);
      expect(reasons[0]).toBeInstanceOf(AttemptAbortedError);
      expect(reasons[0]).toMatchObject({ code: 'ATTEMPT_ABORTED', reason: 'shutdown' });
      // Released: claimable now, the claim not charged to the retry budget, the epoch kept.
      expect(await stepOf(engine, handle.runId)).toMatchObject({
        status: 'scheduled',
        attempt: 0,
        epoch: 1,
        token: ref.token.toString(),
        lease_expires_at_ms: null,
      });
      expect((await attemptsOf(engine, handle.runId)).map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
        [1, 1, 'released'],
      ]);
      const events = await eventsOf(engine, handle.runId);
      expect(events.find((e) => e.type === 'attempt:released')?.data).toEqual({ why: 'shutdown' });
      const firstLeaseEndMs = Date.parse(
        String(events.find((e) => e.type === 'attempt:claimed')?.data?.leaseExpiresAt),
      );

      await startWorker(engine, [patient], { pollIntervalMs: 20, workerId: 'second' });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({
        attempt: 1,
        epoch: 2,
        workerId: 'second',
      });
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.map((a) => [a.attempt, a.epoch, a.worker_id, a.outcome])).toEqual([
        [1, 1, 'first', 'released'],
        [1, 2, 'second', 'completed'],
      ]);
      // Claimed while the first lease (30 s) still had most of its time left: nobody waited for expiry.
      expect(attempts[1]!.claimed_at_ms).toBeLessThan(firstLeaseEndMs - 15_000);
      expect(BigInt(attempts[1]!.token)).toBeGreaterThan(ref.token);
    });

    it('keeps the lease of an attempt that ignores the signal and fails its later context calls', async () => {
      const hold = gate();
      const late: Gate<{ heartbeat: unknown; transaction: unknown }> = gate();
      const contexts: ActivityContext[] = [];
      const stubborn = noInputActivity('stubborn', z.object({ attempt: z.number() }), async (ctx) => {
        if (ctx.info.attempt > 1) return { attempt: ctx.info.attempt };
        contexts.push(ctx);
        await hold.promise; // never looks at ctx.signal
        const heartbeat = await settle(ctx.heartbeat({ late: true }));
        const transaction = await settle(ctx.fencedTransaction(() => Promise.resolve(1)));
        late.open({ heartbeat, transaction });
        return { attempt: ctx.info.attempt };
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [stubborn], { pollIntervalMs: 20 });
      const releases: string[] = [];
      worker.events.on('attempt:released', ({ why }) => releases.push(why));
      await worker.start();
      const started = workerEvent(worker, 'attempt:started');
      const handle = await engine.client.enqueue(stubborn, {});
      const { attempt: ref } = await started;
      const before = await stepOf(engine, handle.runId);

      await worker.stop({ graceMs: 50 });

      const signal = contexts[0]!.signal;
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toMatchObject({ code: 'ATTEMPT_ABORTED', reason: 'shutdown' });
      expect(releases).toEqual([]);
      // Not released: handing the step over while this attempt still runs would overlap executions.
      const kept = await stepOf(engine, handle.runId);
      expect(kept).toMatchObject({ status: 'running', attempt: 1, epoch: 1, token: ref.token.toString() });
      expect(kept.lease_expires_at_ms).toBe(before.lease_expires_at_ms);
      expect(kept.lease_expires_at_ms).toBeGreaterThan(await dbNowMs(engine));
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual([null]);
      const eventCount = (await eventsOf(engine, handle.runId)).length;

      hold.open();
      const calls = await late.promise;
      for (const call of [calls.heartbeat, calls.transaction]) {
        expect(call).toMatchObject({ ok: false, error: { code: 'ATTEMPT_ABORTED' } });
      }
      // Nothing the zombie did reached the database; its return value is not recorded either.
      const after = await stepOf(engine, handle.runId);
      expect(after).toMatchObject({ status: 'running', output: null, last_heartbeat_at_ms: null });
      expect(after.heartbeat_details).toBeNull();
      expect(await eventsOf(engine, handle.runId)).toHaveLength(eventCount);

      // Its lease still ends the usual way: once expired, another worker takes the step over.
      await advanceClock(engine, 31_000);
      await startWorker(engine, [stubborn], { pollIntervalMs: 20 });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      expect((await attemptsOf(engine, handle.runId)).map((a) => [a.attempt, a.outcome])).toEqual([
        [1, 'lease_expired'],
        [2, 'completed'],
      ]);
    });

    it('leaves no timers behind once stop resolves (nor sockets or handles, on pglite)', async () => {
      const job = defineActivity({
        name: 'job',
        input: z.object({ wait: z.boolean() }),
        output: z.object({}),
        async run(input, ctx) {
          if (input.wait) await aborted(ctx.signal);
          return {};
        },
      });
      const engine = await target.engine();
      const baseline = activeResources();
      const timers = trackTimers();
      try {
        const worker = await startWorker(engine, [job], { pollIntervalMs: 20, heartbeatIntervalMs: 50 });
        const done = await engine.client.enqueue(job, { wait: false });
        await done.result({ timeoutMs: 10_000 });
        const started = workerEvent(worker, 'attempt:started');
        await engine.client.enqueue(job, { wait: true });
        await started;
        await workerEvent(worker, 'heartbeat:sent'); // the heartbeat loop runs, with a live attempt
        expect(timers.pendingFrom('/packages/engine/src/').length).toBeGreaterThan(0);
        const released = workerEvent(worker, 'attempt:released');
        await worker.stop({ graceMs: 0 });
        await released;

        expect(worker.runningAttempts).toBe(0);
        expect(timers.pendingFrom('/packages/engine/src/')).toEqual([]);
        // A postgres.js pool keeps its connections open by design; PGlite has none, so nothing may grow.
        if (driver === 'pglite') expect(growthSince(baseline)).toEqual({});
      } finally {
        timers.restore();
      }
    });
  });
}
