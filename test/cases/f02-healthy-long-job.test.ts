/**
 * F02 — a healthy long job must not be reclaimed (shared/cases/FAILURE-CASES.md).
 *
 * Seen in two Postgres-backed queues: a fixed lock expiry, or a heartbeat path that fails on a short blip.
 * L = 3 s, H = 1 s, a 20 s activity of awaited I/O (sleeps that honour `ctx.signal`), run by W1 in its own
 * process; W2, another process serving the same activity directly, would reclaim the step if its lease lapsed.
 * (a) no fault; (b) two 1.5 s CUTs of W1's database connections (a TCP proxy that stops forwarding both ways)
 * at ~5 s and ~12 s; (c) one 5 s CUT.
 *
 * Timing budget: a cut is survived if the last renewal the worker saw, plus L·(1 − ρ) − M, outlives it. With
 * the default margin at L = 3 s (M = 999 ms, capped just below L/3) that leaves L − M − H ≈ 1 s in the worst
 * phase, less than a 1.5 s cut; (a) and (b) therefore run with M = 300 ms (L/10) and start each cut 200 ms
 * after a renewal was acknowledged, which leaves ~1 s of slack on a loaded machine. (c) runs with the defaults.
 */
import { describe, expect, it } from 'vitest';
import { fixtureActivities } from '../fixtures/activities.js';
import type { FixtureTimings, WorkerProcessConfig } from '../fixtures/worker-protocol.js';
import type { FaultCase } from '../support/fault-case.js';
import { SHORT_RETRY, useProcessCase } from '../support/process-case.js';
import type { WorkerProcess } from '../support/worker-process.js';

const timings: FixtureTimings = { leaseMs: 3_000, retry: SHORT_RETRY };
const HEARTBEAT_MS = 1_000;
const JOB_MS = 20_000;
const CUT_MS = 1_500;
/** A 20 s job plus two worker processes' start-up, which takes seconds on a loaded machine. */
const TEST_TIMEOUT_MS = 240_000;

describe('F02: a healthy long job is not reclaimed', () => {
  const { workers, faults, config } = useProcessCase({
    timings,
    heartbeatIntervalMs: HEARTBEAT_MS,
    pollIntervalMs: 100,
  });

  /** W1 (at `w1Url`) claims an `awaited-io` run of `totalMs`; then W2 (direct) starts serving. */
  async function longJob(
    c: FaultCase,
    w1Url: string,
    totalMs: number,
    w1Options: Partial<WorkerProcessConfig> = {},
  ): Promise<{ w1: WorkerProcess; w2: WorkerProcess; runId: string; t1: string; claimedWallMs: number }> {
    const [w1, w2] = await Promise.all([
      workers.spawn(config(c, 'w1', { databaseUrl: w1Url, ...w1Options })),
      workers.spawn(config(c, 'w2', { deferStart: true })),
    ]);
    const { awaitedIo } = fixtureActivities(timings);
    const { runId } = await c.engine.client.enqueue(awaitedIo, { totalMs, sliceMs: 250 });
    const claim = await w1.waitFor('attempt:claimed', (m) => m.attempt.runId === runId);
    await w1.waitFor('fixture:started', (m) => m.attempt.runId === runId);
    await w2.start();
    return { w1, w2, runId, t1: claim.attempt.token, claimedWallMs: claim.wallMs };
  }

  /**
   * Every heartbeat call has its own deadline ≤ H, and a failed one is retried before expiry: each failure is
   * followed, less than L after the last renewal (or the claim) before it, by a renewal or by the completion.
   */
  async function expectHeartbeatsBoundedAndRetried(w1: WorkerProcess, runId: string): Promise<void> {
    const ready = await w1.waitFor('process:ready');
    expect(ready.options.heartbeatIntervalMs).toBe(HEARTBEAT_MS);
    expect(ready.options.heartbeatTimeoutMs).toBeLessThanOrEqual(HEARTBEAT_MS);
    const claimed = await w1.waitFor('attempt:claimed', (m) => m.attempt.runId === runId);
    const completed = await w1.waitFor('attempt:completed', (m) => m.attempt.runId === runId);
    const renewals = w1.all('heartbeat:sent', (m) => m.renewed === 1).map((m) => m.wallMs);
    for (const failure of w1.all('heartbeat:failed')) {
      expect(failure.error.message).toBe(`heartbeat timed out after ${ready.options.heartbeatTimeoutMs} ms`);
      const before = Math.max(claimed.wallMs, ...renewals.filter((t) => t < failure.wallMs));
      const after = Math.min(completed.wallMs, ...renewals.filter((t) => t > failure.wallMs));
      expect(after - before).toBeLessThan(timings.leaseMs);
    }
    expect(w1.all('heartbeat:sent', (m) => m.lost > 0)).toEqual([]);
  }

  /** The single-attempt outcome both (a) and (b) must end with, read from the database. */
  async function expectRanOnceWithoutReclaim(
    c: FaultCase,
    w1: WorkerProcess,
    w2: WorkerProcess,
    runId: string,
    t1: string,
  ): Promise<void> {
    const ofRun = (m: { attempt: { runId: string } }) => m.attempt.runId === runId;
    expect(w1.all('attempt:aborted', ofRun)).toEqual([]);
    expect(w1.all('fixture:signal', ofRun)).toEqual([]);
    expect(w2.all('attempt:claimed', ofRun)).toEqual([]);
    expect(await c.db.run(runId)).toMatchObject({ status: 'completed', output: { slices: JOB_MS / 250 } });
    expect(await c.db.step(runId)).toMatchObject({
      status: 'completed',
      attempt: 1,
      epoch: 1,
      token: t1,
      worker_id: 'w1',
    });
    const attempts = await c.db.attempts(runId);
    expect(attempts.map((a) => [a.attempt, a.epoch, a.token, a.worker_id, a.outcome])).toEqual([
      [1, 1, t1, 'w1', 'completed'],
    ]);
    expect(await c.db.executions(runId)).toEqual([{ token: t1, worker_id: 'w1' }]);
    expect(await c.db.eventTypes(runId)).toEqual([
      'step:scheduled',
      'attempt:claimed',
      'step:completed',
      'run:completed',
    ]);
  }

  it(
    '(a) renews the lease of a 20 s job of awaited I/O: attempt 1, epoch 1, the signal never fires',
    async () => {
      const c = await faults.setUp();
      const { w1, w2, runId, t1, claimedWallMs } = await longJob(c, c.databaseUrl, JOB_MS, {
        leaseSafetyMarginMs: 300,
      });
      const completed = await w1.waitFor('attempt:completed', (m) => m.attempt.runId === runId, {
        timeoutMs: JOB_MS + 10_000,
      });
      expect(completed.wallMs - claimedWallMs).toBeGreaterThanOrEqual(JOB_MS);
      // About one renewal per H (a heartbeat that times out on a loaded machine must be retried in time).
      expect(w1.all('heartbeat:sent', (m) => m.renewed === 1).length).toBeGreaterThanOrEqual(
        JOB_MS / HEARTBEAT_MS - 3,
      );
      await expectHeartbeatsBoundedAndRetried(w1, runId);
      await expectRanOnceWithoutReclaim(c, w1, w2, runId, t1);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    '(b) rides out two 1.5 s cuts of its database connections: no reclaim, failed heartbeats retried in time',
    async () => {
      const c = await faults.setUp();
      const proxy = await faults.proxy();
      const { w1, w2, runId, t1, claimedWallMs } = await longJob(c, proxy.url(c.databaseUrl), JOB_MS, {
        leaseSafetyMarginMs: 300,
      });
      const cuts: { startWallMs: number; endWallMs: number; lastRenewalWallMs: number }[] = [];
      for (const atMs of [5_000, 12_000]) {
        // Cut 200 ms after a renewal at or after `atMs` was acknowledged: the next heartbeat then goes out into
        // the cut and times out inside it.
        const renewal = await w1.waitFor(
          'heartbeat:sent',
          (m) => m.renewed === 1 && m.wallMs >= claimedWallMs + atMs,
          { timeoutMs: atMs + 5_000 },
        );
        await new Promise((resolve) => setTimeout(resolve, 200));
        proxy.blackhole();
        const startWallMs = Date.now();
        await new Promise((resolve) => setTimeout(resolve, CUT_MS));
        proxy.restore();
        cuts.push({ startWallMs, endWallMs: Date.now(), lastRenewalWallMs: renewal.wallMs });
      }
      await w1.waitFor('attempt:completed', (m) => m.attempt.runId === runId, { timeoutMs: JOB_MS + 10_000 });

      for (const cut of cuts) {
        // The cut was real: a heartbeat went out into it and timed out on its own deadline (≤ H, checked below).
        const failed = w1.all(
          'heartbeat:failed',
          (m) => m.wallMs >= cut.startWallMs && m.wallMs <= cut.endWallMs + 100,
        );
        expect(failed.length).toBeGreaterThanOrEqual(1);
        // … and was retried as soon as the connection came back, well before the lease could have expired.
        const renewedAgain = await w1.waitFor(
          'heartbeat:sent',
          (m) => m.renewed === 1 && m.wallMs >= cut.endWallMs,
        );
        expect(renewedAgain.wallMs).toBeLessThan(cut.lastRenewalWallMs + timings.leaseMs);
      }
      await expectHeartbeatsBoundedAndRetried(w1, runId);
      await expectRanOnceWithoutReclaim(c, w1, w2, runId, t1);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    '(c) a 5 s cut: W1 aborts on its local deadline before the lease expires and before W2 reclaims',
    async () => {
      const c = await faults.setUp();
      const proxy = await faults.proxy();
      const jobMs = 8_000;
      const { w1, w2, runId, t1, claimedWallMs } = await longJob(c, proxy.url(c.databaseUrl), jobMs);
      const ofRun = (m: { attempt: { runId: string } }) => m.attempt.runId === runId;
      await w1.waitFor('heartbeat:sent', (m) => m.renewed === 1 && m.wallMs >= claimedWallMs + 1_500);
      proxy.blackhole();
      const cutStartWallMs = Date.now();
      const aborted = await w1.waitFor('attempt:aborted', ofRun, { timeoutMs: 5_000 });
      const claim2 = await w2.waitFor('attempt:claimed', ofRun, { timeoutMs: 5_000 });
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, cutStartWallMs + 5_000 - Date.now())));
      proxy.restore();
      const cutEndWallMs = Date.now();

      // W1 gave up on its own, during the cut, with the signal its code saw.
      expect(aborted.reason).toBe('lease-expired-locally');
      expect(aborted.wallMs).toBeGreaterThan(cutStartWallMs);
      expect(aborted.wallMs).toBeLessThan(cutEndWallMs);
      expect((await w1.waitFor('fixture:signal', ofRun)).reason).toBe('lease-expired-locally');
      // After reconnecting, W1's late outcome is rejected (its lease is gone) and nothing of it is accepted.
      const rejected = await w1.waitFor('attempt:stale-rejected', ofRun, { timeoutMs: 10_000 });
      expect(rejected.error).toMatchObject({
        code: 'LEASE_LOST',
        staleToken: t1,
        currentToken: claim2.attempt.token,
      });
      await w2.waitFor('attempt:completed', ofRun, { timeoutMs: jobMs + 10_000 });
      expect(w1.all('attempt:completed', ofRun)).toEqual([]);

      // The database: W1 aborted before its lease ended, and W2 was granted the step only after that.
      const attempts = await c.db.attempts(runId);
      expect(attempts.map((a) => [a.attempt, a.epoch, a.token, a.worker_id, a.outcome])).toEqual([
        [1, 1, t1, 'w1', 'lease_expired'],
        [2, 2, claim2.attempt.token, 'w2', 'completed'],
      ]);
      const [first, second] = attempts as [(typeof attempts)[0], (typeof attempts)[0]];
      const leaseEndMs = first.ended_at_ms ?? Infinity;
      expect(aborted.wallMs).toBeLessThan(leaseEndMs); // the abort lead is positive
      expect(leaseEndMs).toBeLessThanOrEqual(second.claimed_at_ms);
      expect(BigInt(second.token)).toBeGreaterThan(BigInt(t1));
      expect(await c.db.step(runId)).toMatchObject({
        status: 'completed',
        attempt: 2,
        epoch: 2,
        worker_id: 'w2',
      });
      expect(await c.db.run(runId)).toMatchObject({ status: 'completed', output: { slices: jobMs / 250 } });
      expect(await c.db.executions(runId)).toEqual([
        { token: t1, worker_id: 'w1' },
        { token: claim2.attempt.token, worker_id: 'w2' },
      ]);
      const events = await c.db.events(runId);
      const stale = events.filter((e) => e.type === 'attempt:stale-rejected');
      expect(stale.length).toBeGreaterThanOrEqual(1);
      for (const e of stale) {
        expect(e).toMatchObject({ token: t1, worker_id: 'w1', data: { reason: 'superseded' } });
        expect(e.at_ms).toBeGreaterThanOrEqual(cutEndWallMs - 50);
      }
      expect(events.filter((e) => e.type === 'step:completed').map((e) => e.token)).toEqual([
        claim2.attempt.token,
      ]);
    },
    TEST_TIMEOUT_MS,
  );
});
