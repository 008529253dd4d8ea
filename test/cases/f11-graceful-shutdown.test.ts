/**
 * F11 — graceful shutdown must neither lose nor strand in-flight work (shared/cases/FAILURE-CASES.md).
 *
 * Seen in three queues: a stopping worker dropped its jobs, or kept their locks so that nobody could take them
 * until they timed out. Here W1 holds five long `long-slices` attempts that honour `ctx.signal` and one that
 * ignores it (and tries a fenced write 500 ms after the signal); W2 is running and idle. L = 4 s, H = 1 s,
 * grace G = 2 s (the worker process stops with `engine.close({ graceMs })` on SIGTERM, test/fixtures/worker-main.ts).
 * (1) SIGTERM at 0, SIGKILL at G + 3 s; (2) SIGKILL 100 ms after SIGTERM; (3) one attempt returns 1 s after
 * SIGTERM, inside the grace period. Each long attempt runs long only on its first epoch, so W2 finishes a
 * reclaimed one at once. Times are the database's (attempt rows) where the database recorded them, and wall
 * clock of the same host (IPC messages) for what only the worker saw (its signal).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { fixtureActivities } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { type AttemptRecord, type FaultCase } from '../support/fault-case.js';
import { SHORT_RETRY, heartbeatEvery, useProcessCase } from '../support/process-case.js';
import { runRecords } from '../support/run-records.js';
import type { WorkerProcess } from '../support/worker-process.js';
import { pollUntil } from '../support/wait.js';

const timings: FixtureTimings = { leaseMs: 4_000, retry: SHORT_RETRY };
const HEARTBEAT_MS = 1_000;
const POLL_MS = 500;
const GRACE_MS = 2_000;
/** The grace period of case (3), whose attempt returns 1 s after SIGTERM. */
const FINISH_GRACE_MS = 8_000;
/** Long enough that only the shutdown ends a first attempt. */
const FOREVER_MS = 60_000;
/** Slack for IPC, scheduling and query latency on a loaded two-core machine, added to every timing bound. */
const MARGIN_MS = 1_500;

type LongSlicesInput = z.input<ReturnType<typeof fixtureActivities>['longSlices']['input']>;

describe('F11: graceful shutdown loses nothing and strands nothing', () => {
  const { workers, faults, config } = useProcessCase({
    timings,
    ...heartbeatEvery(HEARTBEAT_MS),
    pollIntervalMs: POLL_MS,
    concurrency: 10,
    poolSize: 4,
  });
  const { longSlices, recordStep } = fixtureActivities(timings);

  /**
   * W1 holds `cooperative` attempts that honour the signal and `ignoring` that do not, each started (its
   * `executions` row written); W2 is then started and has nothing to claim.
   */
  async function w1Holding(
    c: FaultCase,
    runs: { cooperative: number; ignoring: number; finishing?: number },
    graceMs = GRACE_MS,
  ): Promise<{
    w1: WorkerProcess;
    w2: WorkerProcess;
    cooperative: string[];
    ignoring: string[];
    finishing: string[];
    results: Promise<unknown[]>;
  }> {
    const [w1, w2] = await Promise.all([
      workers.spawn(config(c, 'w1', { shutdownGraceMs: graceMs })),
      workers.spawn(config(c, 'w2', { shutdownGraceMs: graceMs, deferStart: true })),
    ]);
    const enqueue = (input: LongSlicesInput, n: number) =>
      Promise.all(Array.from({ length: n }, () => c.engine.client.enqueue(longSlices, input)));
    const [cooperative, ignoring, finishing] = await Promise.all([
      enqueue({ totalMs: FOREVER_MS }, runs.cooperative),
      enqueue({ totalMs: FOREVER_MS, honourSignal: false, lateWriteAfterSignalMs: 500 }, runs.ignoring),
      enqueue({ totalMs: FOREVER_MS, finishAfterSigtermMs: 1_000 }, runs.finishing ?? 0),
    ]);
    const all = [...cooperative, ...ignoring, ...finishing];
    for (const h of all) await w1.waitFor('fixture:started', (m) => m.attempt.runId === h.runId);
    await w2.start();
    return {
      w1,
      w2,
      cooperative: cooperative.map((h) => h.runId),
      ignoring: ignoring.map((h) => h.runId),
      finishing: finishing.map((h) => h.runId),
      results: Promise.all(all.map((h) => h.result({ timeoutMs: 30_000 }))),
    };
  }

  /** Every attempt of these runs ended and no run is left unfinished; no late write reached the database. */
  async function expectNothingLostOrRunning(c: FaultCase, runIds: readonly string[]): Promise<void> {
    for (const runId of runIds) {
      expect(await c.db.run(runId)).toMatchObject({ status: 'completed' });
      expect((await c.db.attempts(runId)).filter((a) => a.outcome === null)).toEqual([]);
      expect(await c.db.markers(runId)).toEqual([]);
    }
    const [open] = await c.sql.unsafe<{ n: number }[]>(
      `SELECT count(*)::int AS n FROM "${c.schema}".attempts WHERE outcome IS NULL`,
    );
    expect(open?.n).toBe(0);
  }

  const shape = (attempts: AttemptRecord[]) =>
    attempts.map((a) => [a.attempt, a.epoch, a.worker_id, a.outcome]);

  it('(1) SIGTERM: W1 stops claiming, aborts at the grace end, releases the cooperative attempts to W2 at once; the ignoring one waits for its lease', async () => {
    const c = await faults.setUp();
    const db = runRecords(c.sql, c.schema);
    const { w1, w2, cooperative, ignoring, results } = await w1Holding(c, { cooperative: 5, ignoring: 1 });
    const [stubborn] = ignoring as [string];

    const termAtMs = await db.nowMs();
    const termWallMs = Date.now();
    expect(w1.kill('SIGTERM')).toBe(true);
    const stopping = await w1.waitFor('worker:stopping');
    // Work that arrives after the SIGTERM goes to W2 only, although W1 has free slots.
    const extras = await Promise.all(
      ['x1', 'x2'].map((step) => c.engine.client.enqueue(recordStep, { step })),
    );
    await Promise.all(extras.map((h) => h.result({ timeoutMs: 20_000 })));

    // The grace period ends: every long attempt gets its signal; the cooperative ones are released (fenced).
    for (const runId of cooperative)
      await w1.waitFor('attempt:released', (m) => m.attempt.runId === runId, { timeoutMs: 10_000 });
    await pollUntil(db.nowMs, (now) => now >= termAtMs + GRACE_MS + 3_000, { what: 'grace + 3 s' });
    w1.kill('SIGKILL'); // false if it already exited on its own
    const exit = await w1.exited;
    expect(exit.signal === 'SIGKILL' || exit.code === 0).toBe(true);
    await results;

    // W1 started nothing after it began stopping: a claim of its already in flight may still have taken an extra,
    // and that grant was released unstarted (uncharged: W2's attempt is attempt 1 again).
    const lateGrants = w1.all('attempt:claimed', (m) => m.wallMs >= stopping.wallMs);
    for (const g of lateGrants) {
      expect(extras.map((h) => h.runId)).toContain(g.attempt.runId);
      await w1.waitFor(
        'attempt:released',
        (m) => m.attempt.token === g.attempt.token && m.why === 'shutdown',
      );
    }
    expect(w1.all('attempt:started', (m) => m.wallMs >= stopping.wallMs)).toEqual([]);
    for (const h of extras) {
      const released = lateGrants.some((g) => g.attempt.runId === h.runId);
      expect(shape(await c.db.attempts(h.runId))).toEqual([
        ...(released ? [[1, 1, 'w1', 'released']] : []),
        [1, released ? 2 : 1, 'w2', 'completed'],
      ]);
      expect((await c.db.executions(h.runId)).map((e) => e.worker_id)).toEqual(['w2']);
    }
    // The signal fired at the end of the grace period, for the shutdown, in every long attempt.
    const signals = w1.all('fixture:signal', (m) => [...cooperative, stubborn].includes(m.attempt.runId));
    expect(signals.map((s) => s.reason)).toEqual(Array(6).fill('shutdown'));
    for (const s of signals) {
      expect(s.wallMs - termWallMs).toBeGreaterThanOrEqual(GRACE_MS - 50);
      expect(s.wallMs - termWallMs).toBeLessThanOrEqual(GRACE_MS + MARGIN_MS);
    }

    // The cooperative attempts: released (not charged: W2's claim is attempt 1 again, epoch 2), and W2 took them
    // within a second and a poll of the release — long before their 4 s leases could have expired.
    for (const runId of cooperative) {
      const attempts = await c.db.attempts(runId);
      expect(shape(attempts)).toEqual([
        [1, 1, 'w1', 'released'],
        [1, 2, 'w2', 'completed'],
      ]);
      const [a1, a2] = attempts as [AttemptRecord, AttemptRecord];
      expect(a1.ended_at_ms).toBeGreaterThanOrEqual(termAtMs + GRACE_MS - 50);
      expect(a2.claimed_at_ms).toBeGreaterThanOrEqual(a1.ended_at_ms ?? Infinity);
      expect(a2.claimed_at_ms - (a1.ended_at_ms ?? NaN)).toBeLessThanOrEqual(1_000 + POLL_MS);
      expect(a2.claimed_at_ms - termAtMs).toBeLessThan(GRACE_MS + timings.leaseMs);
      expect((await c.db.events(runId)).filter((e) => e.type === 'attempt:released')).toMatchObject([
        { token: a1.token, worker_id: 'w1', data: { why: 'shutdown' } },
      ]);
      expect((await c.db.executions(runId)).map((e) => e.worker_id)).toEqual(['w1', 'w2']);
    }

    // The ignoring attempt kept its lease (it was not released while its code ran) and was reclaimed only
    // after that lease expired, past the grace end; its late fenced write was refused without reaching the
    // database.
    const attempts = await c.db.attempts(stubborn);
    expect(shape(attempts)).toEqual([
      [1, 1, 'w1', 'lease_expired'],
      [2, 2, 'w2', 'completed'],
    ]);
    const [s1, s2] = attempts as [AttemptRecord, AttemptRecord];
    expect(s1.ended_at_ms).toBeGreaterThan(termAtMs + GRACE_MS);
    expect(s2.claimed_at_ms).toBeGreaterThanOrEqual(s1.ended_at_ms ?? Infinity);
    expect(s2.claimed_at_ms - (s1.ended_at_ms ?? NaN)).toBeLessThanOrEqual(100 + POLL_MS + MARGIN_MS);
    expect(w1.all('attempt:released', (m) => m.attempt.runId === stubborn)).toEqual([]);
    expect(
      w1
        .all('fixture:ctx-error', (m) => m.attempt.runId === stubborn)
        .map((m) => [m.operation, m.error.code, m.error.reason]),
    ).toEqual([['late-write', 'ATTEMPT_ABORTED', 'shutdown']]);
    expect(w1.all('fixture:marker-written')).toEqual([]);
    expect(w2.all('attempt:claimed', (m) => m.attempt.runId === stubborn)).toHaveLength(1);

    await expectNothingLostOrRunning(c, [...cooperative, stubborn, ...extras.map((h) => h.runId)]);
  });

  it('(2) SIGKILL 100 ms after SIGTERM: W2 reclaims all six within a lease and a poll of the kill', async () => {
    const c = await faults.setUp();
    const db = runRecords(c.sql, c.schema);
    const { w1, cooperative, ignoring, results } = await w1Holding(c, { cooperative: 5, ignoring: 1 });

    expect(w1.kill('SIGTERM')).toBe(true);
    await sleep(100); // the fault schedule itself, not a wait for an outcome
    expect(w1.kill('SIGKILL')).toBe(true);
    expect(await w1.exited).toMatchObject({ signal: 'SIGKILL' });
    const killedAtMs = await db.nowMs();
    await results;

    for (const runId of [...cooperative, ...ignoring]) {
      const attempts = await c.db.attempts(runId);
      expect(shape(attempts)).toEqual([
        [1, 1, 'w1', 'lease_expired'],
        [2, 2, 'w2', 'completed'],
      ]);
      const [a1, a2] = attempts as [AttemptRecord, AttemptRecord];
      expect(a2.claimed_at_ms).toBeGreaterThanOrEqual(a1.ended_at_ms ?? Infinity);
      // Reclaimed within L + the poll interval of the kill (plus the 100 ms reclaim backoff and slack).
      expect(a2.claimed_at_ms - killedAtMs).toBeLessThanOrEqual(timings.leaseMs + POLL_MS + 100 + MARGIN_MS);
    }
    // The grace period never ended: no signal, nothing released.
    expect(w1.all('fixture:signal')).toEqual([]);
    expect(w1.all('attempt:released')).toEqual([]);
    await expectNothingLostOrRunning(c, [...cooperative, ...ignoring]);
  });

  it('(3) an attempt that returns inside the grace period is completed once, by W1, and not run again', async () => {
    const c = await faults.setUp();
    // A grace period far longer than the 1 s the attempt takes to return: on a loaded CI machine the attempt's
    // timer and its completion were seen to take over a second more, and the grace end then released it (the
    // cooperative way) instead of its completion landing — what (1) tests, not this case.
    const { w1, w2, cooperative, finishing, results } = await w1Holding(
      c,
      { cooperative: 1, ignoring: 0, finishing: 1 },
      FINISH_GRACE_MS,
    );
    const [done] = finishing as [string];

    const termWallMs = Date.now();
    expect(w1.kill('SIGTERM')).toBe(true);
    const completed = await w1.waitFor('attempt:completed', (m) => m.attempt.runId === done);
    expect(completed.wallMs - termWallMs).toBeGreaterThanOrEqual(1_000);
    expect(completed.wallMs - termWallMs).toBeLessThan(FINISH_GRACE_MS);
    // W1 then stops by itself: the cooperative attempt is released at the grace end, and the process exits.
    expect(await w1.exited).toEqual({ code: 0, signal: null });
    await results;

    expect(shape(await c.db.attempts(done))).toEqual([[1, 1, 'w1', 'completed']]);
    expect((await c.db.events(done)).filter((e) => e.type === 'step:completed')).toHaveLength(1);
    expect((await c.db.executions(done)).map((e) => e.worker_id)).toEqual(['w1']);
    expect(w2.all('attempt:claimed', (m) => m.attempt.runId === done)).toEqual([]);
    expect(await c.db.run(done)).toMatchObject({ output: { epoch: 1 } });
    expect(shape(await c.db.attempts(cooperative[0] as string))).toEqual([
      [1, 1, 'w1', 'released'],
      [1, 2, 'w2', 'completed'],
    ]);
    await expectNothingLostOrRunning(c, [done, ...cooperative]);
  });
});
