/**
 * F03 — giving up on an attempt must reach the running code (shared/cases/FAILURE-CASES.md).
 *
 * Seen in three engines: the engine timed out, cancelled or discarded an attempt, but the code kept running
 * and overlapped its own retry. The `signal-slices` activity loops 10 s in 100 ms slices, checks `ctx.signal`
 * between slices, and writes a marker row (unfenced) if it is still running 500 ms after the signal fired.
 * (a) start-to-close 2 s, no user heartbeats; (c) max attempts 1 and a 3 s CUT on a 2 s lease, then W1
 * reconnects. (b), cancel at 1 s, is not covered here. A control shows the marker catches code that ignores
 * the signal, so "no marker" means something.
 */
import { describe, expect, it } from 'vitest';
import { fixtureActivities } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { useProcessCase } from '../support/process-case.js';
import { pollUntil } from '../support/wait.js';

/** Slack for one 100 ms slice plus IPC and scheduling on a loaded machine. */
const STOP_WITHIN_MS = 400;

describe('F03: giving up reaches the running code', () => {
  const { workers, faults, config } = useProcessCase({ pollIntervalMs: 100 });

  it('(a) fires the signal at the start-to-close deadline; the code stops and attempt 2 starts after attempt 1 ended', async () => {
    // Default margin (L/3 at this lease): the signal fires ~0.67 s before the deadline, which leaves the
    // timeout's fenced write time to land before the lease (capped at the deadline) runs out.
    const timings: FixtureTimings = {
      leaseMs: 2_000,
      startToCloseTimeoutMs: 2_000,
      retry: { maximumAttempts: 2, initialIntervalMs: 200, jitter: 0 },
    };
    const heartbeatMs = 500;
    const c = await faults.setUp();
    const extra = { heartbeatIntervalMs: heartbeatMs };
    const [w1, w2] = await Promise.all([
      workers.spawn(config(c, 'w1', { timings, ...extra })),
      workers.spawn(config(c, 'w2', { timings, ...extra })),
    ]);
    const { signalSlices } = fixtureActivities(timings);
    const handle = await c.engine.client.enqueue(signalSlices, { totalMs: 10_000 });
    const runId = handle.runId;
    await expect(handle.result({ timeoutMs: 15_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });

    const attempts = await c.db.attempts(runId);
    expect(attempts.map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
      [1, 1, 'timed_out'],
      [2, 2, 'timed_out'],
    ]);
    const [first, second] = attempts as [(typeof attempts)[0], (typeof attempts)[0]];
    // Attempt 2 was granted only after attempt 1 had ended (its timeout recorded, its lease gone).
    expect(second.claimed_at_ms).toBeGreaterThanOrEqual(first.ended_at_ms ?? Infinity);

    // The run's failure is in the database before the last attempt's code reports its end over IPC: wait for
    // each attempt's report from the worker that ran it.
    for (const a of attempts) {
      const owner = a.worker_id === w1.workerId ? w1 : w2;
      await owner.waitFor('fixture:ended', (m) => m.attempt.token === a.token, { timeoutMs: 10_000 });
    }
    const messages = [...w1.messages, ...w2.messages].filter(
      (m) => 'attempt' in m && m.attempt.runId === runId,
    );
    for (const a of attempts) {
      const of = <T extends { type: string }>(type: T['type']) =>
        messages.filter(
          (m) => m.type === type && 'attempt' in m && m.attempt.token === a.token,
        ) as unknown as T[];
      // The signal fired once, for the deadline, within 2 s + H of the claim (not prematurely either) …
      const signals = of<{ type: 'fixture:signal'; reason: string; wallMs: number }>('fixture:signal');
      expect(signals.map((s) => s.reason)).toEqual(['deadline']);
      const firedAfterMs = (signals[0]?.wallMs ?? NaN) - a.claimed_at_ms;
      expect(firedAfterMs).toBeGreaterThan(500);
      expect(firedAfterMs).toBeLessThanOrEqual(timings.startToCloseTimeoutMs! + heartbeatMs);
      // … and the code stopped at the next slice, long before its attempt ended in the database.
      const ended = of<{ type: 'fixture:ended'; outcome: string; wallMs: number }>('fixture:ended');
      expect(ended.map((e) => e.outcome)).toEqual(['threw']);
      expect((ended[0]?.wallMs ?? NaN) - (signals[0]?.wallMs ?? NaN)).toBeLessThan(STOP_WITHIN_MS);
    }
    expect(await c.db.markers(runId)).toEqual([]);

    expect(await c.db.run(runId)).toMatchObject({ status: 'failed', error: { type: 'StartToCloseTimeout' } });
    expect(await c.db.step(runId)).toMatchObject({ status: 'failed', attempt: 2, epoch: 2 });
    expect(await c.db.eventTypes(runId)).toEqual([
      'step:scheduled',
      'attempt:claimed',
      'attempt:failed',
      'attempt:claimed',
      'step:failed',
      'run:failed',
    ]);
  });

  it('(control) the marker catches code that keeps running after the signal', async () => {
    const timings: FixtureTimings = {
      leaseMs: 3_000,
      startToCloseTimeoutMs: 1_000,
      retry: { maximumAttempts: 1 },
    };
    const c = await faults.setUp();
    const w1 = await workers.spawn(
      config(c, 'w1', { timings, heartbeatIntervalMs: 500, leaseSafetyMarginMs: 200 }),
    );
    const { signalSlices } = fixtureActivities(timings);
    const { runId } = await c.engine.client.enqueue(signalSlices, { totalMs: 2_000, honourSignal: false });
    await w1.waitFor('fixture:ended', (m) => m.attempt.runId === runId, { timeoutMs: 10_000 });
    expect((await c.db.markers(runId)).map((m) => m.kind)).toEqual([
      'still-running-after-signal',
      'ran-to-end',
    ]);
  });

  it('(c) after a 3 s cut on a 2 s lease, W1 aborts, its late writes are rejected and the run fails as expired', async () => {
    const timings: FixtureTimings = { leaseMs: 2_000, retry: { maximumAttempts: 1 } };
    const c = await faults.setUp();
    const proxy = await faults.proxy();
    const [w1, w2] = await Promise.all([
      workers.spawn({
        ...config(c, 'w1', { timings, heartbeatIntervalMs: 500 }),
        databaseUrl: proxy.url(c.databaseUrl),
      }),
      workers.spawn(config(c, 'w2', { timings, heartbeatIntervalMs: 500, deferStart: true })),
    ]);
    const { signalSlices } = fixtureActivities(timings);
    const handle = await c.engine.client.enqueue(signalSlices, { totalMs: 10_000 });
    const runId = handle.runId;
    const ofRun = (m: { attempt: { runId: string } }) => m.attempt.runId === runId;
    const claim = await w1.waitFor('attempt:claimed', ofRun);
    const t1 = claim.attempt.token;
    await w2.start(); // it could reclaim (it cannot: no attempts left) and it ends expired steps

    await w1.waitFor('heartbeat:sent', (m) => m.renewed === 1 && m.wallMs >= claim.wallMs + 400);
    await new Promise((resolve) => setTimeout(resolve, 200));
    proxy.blackhole();
    const cutStartWallMs = Date.now();
    // While W1 is cut off, its lease expires and the run fails for good (W2's maintenance ends it).
    await expect(handle.result({ timeoutMs: 5_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, cutStartWallMs + 3_000 - Date.now())));
    proxy.restore();
    const cutEndWallMs = Date.now();

    // W1 learns it lost: its late outcome write is rejected with LeaseLostError.
    const rejected = await w1.waitFor('attempt:stale-rejected', ofRun, { timeoutMs: 10_000 });
    expect(rejected.error).toMatchObject({ code: 'LEASE_LOST', staleToken: t1 });
    // Its signal had fired during the cut, on its local deadline, and its code stopped without a marker.
    const signal = await w1.waitFor('fixture:signal', ofRun);
    expect(signal.reason).toBe('lease-expired-locally');
    expect(signal.wallMs).toBeGreaterThan(cutStartWallMs);
    expect(signal.wallMs).toBeLessThan(cutEndWallMs);
    const ended = await w1.waitFor('fixture:ended', ofRun);
    expect(ended.wallMs - signal.wallMs).toBeLessThan(STOP_WITHIN_MS);
    expect(await c.db.markers(runId)).toEqual([]);
    expect(w1.all('attempt:completed', ofRun)).toEqual([]);
    expect(w2.all('attempt:claimed', ofRun)).toEqual([]);

    // The database: failed, with a reason that says the lease expired; the only attempt ended lease_expired.
    const run = await c.db.run(runId);
    expect(run.status).toBe('failed');
    expect(run.error?.type).toBe('LeaseExpired');
    expect(run.error?.message).toMatch(/lease expired/);
    const step = await c.db.step(runId);
    expect(step).toMatchObject({ status: 'failed', attempt: 1, epoch: 1 });
    expect(BigInt(step.token)).toBeGreaterThan(BigInt(t1)); // expiry fenced the zombie out
    const attempts = await c.db.attempts(runId);
    expect(attempts.map((a) => [a.attempt, a.epoch, a.token, a.worker_id, a.outcome])).toEqual([
      [1, 1, t1, 'w1', 'lease_expired'],
    ]);
    // W1's first writes after reconnecting — the heartbeat that was caught in the cut among them — were
    // rejected and recorded; none was accepted.
    // (The hung heartbeat and the outcome write travel on different connections: wait for both rejections.)
    const events = await pollUntil(
      () => c.db.events(runId),
      (evs) => evs.filter((e) => e.type === 'attempt:stale-rejected').length >= 2,
      { timeoutMs: 5_000, what: 'both stale rejections' },
    );
    const stale = events.filter((e) => e.type === 'attempt:stale-rejected');
    for (const e of stale) {
      // Expiry maintenance ended the step and bumped its token without granting it to anyone: 'expired'.
      expect(e).toMatchObject({ token: t1, worker_id: 'w1', data: { staleToken: t1, reason: 'expired' } });
      expect(e.at_ms).toBeGreaterThanOrEqual(cutEndWallMs - 50);
    }
    expect(stale.map((e) => (e.data as { operation: string }).operation).sort()).toEqual([
      'fail',
      'heartbeat',
    ]);
    expect(events.map((e) => e.type).filter((t) => t.startsWith('step:') || t.startsWith('run:'))).toEqual([
      'step:scheduled',
      'step:failed',
      'run:failed',
    ]);
  });
});
