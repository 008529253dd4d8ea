/**
 * F08 — a poison job counts its attempts (shared/cases/FAILURE-CASES.md).
 *
 * Seen in a Redis-backed automation platform: a job that killed its worker was redelivered forever, because an
 * attempt was counted only when it reported an outcome — which a dead worker never does. Here the `poison`
 * activity (test/fixtures/activities.ts) records its start (a fenced `executions` row) and SIGKILLs its own
 * worker process, on every attempt. Max attempts 3, backoff 300 ms × 2ⁿ (the case's 1 s × 2ⁿ, shrunk), no
 * jitter; L = 2 s. Three worker processes run under a small supervisor in this test that spawns a replacement
 * whenever one dies; 50 healthy runs share the workers. Second pass: the poison run is cancelled during its
 * second attempt. All times are the database's.
 */
import { describe, expect, it } from 'vitest';
import type { RetryPolicy } from '@palisade/sdk';
import { fixtureActivities } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { type AttemptRecord, type FaultCase } from '../support/fault-case.js';
import { heartbeatEvery, useProcessCase } from '../support/process-case.js';
import { runRecords, type RunRecords } from '../support/run-records.js';
import type { WorkerProcess } from '../support/worker-process.js';
import { pollUntil } from '../support/wait.js';

const timings: FixtureTimings = {
  leaseMs: 2_000,
  retry: { maximumAttempts: 10, initialIntervalMs: 100, jitter: 0 },
};
/** The poison run's policy: the backoff after attempt n (failed or expired) is 300 ms × 2ⁿ⁻¹. */
const POISON_RETRY = {
  maximumAttempts: 3,
  initialIntervalMs: 300,
  backoffCoefficient: 2,
  jitter: 0,
} as const satisfies RetryPolicy;
const backoffMs = (attempt: number): number =>
  POISON_RETRY.initialIntervalMs * POISON_RETRY.backoffCoefficient ** (attempt - 1);
const HEALTHY_RUNS = 50;
const POLL_MS = 200;
const HEARTBEAT_MS = 500;
/** Slack for IPC, scheduling and query latency on a loaded two-core machine, added to every timing bound. */
const MARGIN_MS = 2_000;

interface Crash {
  readonly workerId: string;
  readonly signal: NodeJS.Signals | null;
  /** When the test saw the process gone (DB clock). */
  readonly atMs: number;
}

/** Keeps `size` worker processes alive: when one exits, a fresh one (a new worker id) takes its slot. */
interface Supervisor {
  readonly crashes: readonly Crash[];
  readonly workers: readonly WorkerProcess[];
  /** Stop replacing workers (the test's own cleanup then stops the live ones). */
  stop(): Promise<void>;
}

describe('F08: a job that kills its worker is not retried forever', () => {
  const {
    workers: processes,
    faults,
    config,
  } = useProcessCase({
    timings,
    ...heartbeatEvery(HEARTBEAT_MS),
    pollIntervalMs: POLL_MS,
    concurrency: 4,
    poolSize: 3,
  });
  const { poison, recordStep } = fixtureActivities(timings);

  async function supervise(c: FaultCase, db: RunRecords, size: number): Promise<Supervisor> {
    const crashes: Crash[] = [];
    const all: WorkerProcess[] = [];
    const respawns: Promise<void>[] = [];
    let stopped = false;
    const generation = new Map<number, number>();
    const start = async (slot: number): Promise<void> => {
      const n = (generation.get(slot) ?? 0) + 1;
      generation.set(slot, n);
      const w = await processes.spawn(config(c, `w${slot + 1}.${n}`));
      all.push(w);
      void w.exited.then(async ({ signal }) => {
        if (stopped) return;
        crashes.push({ workerId: w.workerId, signal, atMs: await db.nowMs() });
        if (!stopped) respawns.push(start(slot));
      });
    };
    await Promise.all(Array.from({ length: size }, (_, slot) => start(slot)));
    return {
      crashes,
      workers: all,
      async stop() {
        stopped = true;
        await Promise.all(respawns);
      },
    };
  }

  /**
   * A fresh case served by three supervised worker processes and one poison run enqueued; `body` runs, then the
   * supervisor stops replacing workers.
   */
  async function withPoisonRun(
    body: (run: {
      c: FaultCase;
      db: RunRecords;
      supervisor: Supervisor;
      handle: Awaited<ReturnType<FaultCase['engine']['client']['enqueue']>>;
      runId: string;
    }) => Promise<void>,
  ): Promise<void> {
    const c = await faults.setUp();
    const db = runRecords(c.sql, c.schema);
    const supervisor = await supervise(c, db, 3);
    try {
      const handle = await c.engine.client.enqueue(poison, {}, { retry: POISON_RETRY });
      await body({ c, db, supervisor, handle, runId: handle.runId });
    } finally {
      await supervisor.stop();
    }
  }

  const shape = (attempts: AttemptRecord[]) =>
    attempts.map((a) => [a.attempt, a.epoch, a.worker_id, a.outcome]);

  it('counts each attempt at claim: three crashes, reclaims after the backoff, then the step fails naming the lost lease; 50 healthy runs complete', async () => {
    await withPoisonRun(async ({ c, supervisor, handle, runId }) => {
      const healthy = await Promise.all(
        Array.from({ length: HEALTHY_RUNS }, (_, i) =>
          c.engine.client.enqueue(recordStep, { step: `h${i}` }),
        ),
      );

      // The first attempt killed its worker; the step already counts it, while its lease still runs.
      await pollUntil(
        () => Promise.resolve(supervisor.crashes.length),
        (n) => n >= 1,
        { what: 'the first crash' },
      );
      const afterCrash = await c.db.step(runId);
      expect(afterCrash).toMatchObject({ status: 'running', attempt: 1, epoch: 1 });
      expect((await c.db.attempts(runId)).map((a) => a.outcome)).toEqual([null]);

      await expect(handle.result({ timeoutMs: 40_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
      await Promise.all(healthy.map((h) => h.result({ timeoutMs: 30_000 })));

      // Exactly three crashes, each the worker that held one attempt.
      expect(supervisor.crashes.map((x) => x.signal)).toEqual(['SIGKILL', 'SIGKILL', 'SIGKILL']);
      const attempts = await c.db.attempts(runId);
      expect(shape(attempts)).toEqual(
        supervisor.crashes.map((x, i) => [i + 1, i + 1, x.workerId, 'lease_expired']),
      );
      expect((await c.db.executions(runId)).map((e) => e.token)).toEqual(attempts.map((a) => a.token));

      // Each reclaim came after the previous lease expired *and* its backoff passed (by the DB clock), and
      // promptly after that.
      for (let n = 1; n < attempts.length; n++) {
        const [prev, next] = [attempts[n - 1], attempts[n]] as [AttemptRecord, AttemptRecord];
        expect((prev.ended_at_ms ?? NaN) - prev.claimed_at_ms).toBeGreaterThanOrEqual(timings.leaseMs - 50);
        const gapMs = next.claimed_at_ms - (prev.ended_at_ms ?? NaN);
        expect(gapMs).toBeGreaterThanOrEqual(backoffMs(n) - 1);
        expect(gapMs).toBeLessThanOrEqual(backoffMs(n) + POLL_MS + MARGIN_MS);
      }

      // The step failed for good, with a reason that names the expired lease and the lost worker.
      const step = await c.db.step(runId);
      expect(step).toMatchObject({ status: 'failed', attempt: 3, epoch: 3 });
      expect(step.error?.type).toBe('LeaseExpired');
      expect(step.error?.message).toMatch(/attempt 3 of 3 .*lease expired \(worker lost/);
      expect(await c.db.run(runId)).toMatchObject({ status: 'failed', error: step.error });
      const terminal = (await c.db.events(runId)).filter((e) => e.type === 'step:failed');
      expect(terminal).toHaveLength(1);

      // The healthy runs all completed (a few may have shared a claim with the poison and been reclaimed).
      for (const h of healthy) expect(await c.db.run(h.runId)).toMatchObject({ status: 'completed' });
      const [open] = await c.sql.unsafe<{ n: number }[]>(
        `SELECT count(*)::int AS n FROM "${c.schema}".attempts WHERE outcome IS NULL`,
      );
      expect(open?.n).toBe(0);
      expect(supervisor.crashes).toHaveLength(3);
    });
  });

  it('cancelled during its second attempt, the poison run ends cancelled with no further attempt', async () => {
    await withPoisonRun(async ({ c, db, supervisor, handle, runId }) => {
      // The second attempt has started (its executions row is committed) and its worker is dying.
      await pollUntil(
        () => c.db.executions(runId),
        (rows) => rows.length >= 2,
        { what: 'the second attempt', timeoutMs: 20_000 },
      );
      const cancelAtMs = await db.nowMs();
      await handle.cancel();
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'CANCELLED' });

      const attempts = await c.db.attempts(runId);
      // The cancel ends the run at once, while attempt 2's worker may still be dying: wait for its crash.
      await supervisor.workers.find((w) => w.workerId === attempts[1]?.worker_id)?.exited;
      await pollUntil(
        () => Promise.resolve(supervisor.crashes.length),
        (n) => n >= 2,
        { what: 'the second crash recorded', timeoutMs: 10_000 },
      );
      // Attempt 1 lost its lease to the crash; attempt 2 was held (by a dying worker) when the cancel ended it.
      expect(shape(attempts)).toEqual(
        supervisor.crashes.map((x, i) => [i + 1, i + 1, x.workerId, i === 0 ? 'lease_expired' : 'cancelled']),
      );
      expect(attempts).toHaveLength(2);
      // The cancel arrived while attempt 2 held its lease.
      expect(cancelAtMs).toBeLessThan((attempts[1]?.claimed_at_ms ?? -Infinity) + timings.leaseMs);
      expect(await c.db.step(runId)).toMatchObject({ status: 'cancelled', attempt: 2, epoch: 2 });
      expect(await c.db.run(runId)).toMatchObject({ status: 'cancelled' });
      expect(await c.db.executions(runId)).toHaveLength(2);
      expect(supervisor.crashes.map((x) => x.signal)).toEqual(['SIGKILL', 'SIGKILL']);
    });
  });
});
