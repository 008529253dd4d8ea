/**
 * The crash suites (test/cases/kill-mid-run, signal-kill, f07-crash-recovery): worker processes on 2 s step and
 * turn leases with 500 ms heartbeats and a short reclaim backoff, the fixture workflows built on those timings,
 * the kill of a worker timed by the database clock, and the check of a killed attempt's reclaim.
 *
 *   const { setUpPair, workflows } = useCrashSuite({ pollIntervalMs: 200 });
 *   const { c, db, w1, w2 } = await setUpPair();      // w2 spawned ahead, started by the test
 *   const killedAtMs = await sigkillAt(db, w1);
 */
import { expect } from 'vitest';
import { fixtureActivities, fixtureWorkflows } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { SHORT_RETRY, heartbeatEvery, sigkill, useProcessCase, type ProcessCase } from './process-case.js';
import type { RunAttempt, RunRecords } from './run-records.js';
import type { WorkerProcess } from './worker-process.js';

/** Step timings of the crash suites: a 2 s lease, reclaimed 100 ms after it expired. */
export const CRASH_TIMINGS: FixtureTimings = { leaseMs: 2_000, retry: SHORT_RETRY };
/** The turn lease of the crash suites (ms): as long as a step's. */
export const CRASH_TURN_LEASE_MS = 2_000;
/** The heartbeat interval (and bound) of the crash suites' workers (ms). */
export const CRASH_HEARTBEAT_MS = 500;

/**
 * Register a crash suite's hooks: a process case whose workers poll every `pollIntervalMs` (ms) on the crash
 * timings, and the fixture workflows on those timings.
 */
export function useCrashSuite({ pollIntervalMs }: { pollIntervalMs: number }): ProcessCase & {
  readonly workflows: ReturnType<typeof fixtureWorkflows>;
} {
  const processCase = useProcessCase({
    timings: CRASH_TIMINGS,
    ...heartbeatEvery(CRASH_HEARTBEAT_MS),
    pollIntervalMs,
    turnLeaseMs: CRASH_TURN_LEASE_MS,
  });
  return { ...processCase, workflows: fixtureWorkflows(fixtureActivities(CRASH_TIMINGS)) };
}

/** SIGKILL `w` (see {@link sigkill}); resolves with the database time (epoch ms) once it is gone. */
export async function sigkillAt(db: RunRecords, w: WorkerProcess): Promise<number> {
  await sigkill(w);
  return db.nowMs();
}

/**
 * The step `label` of a crash suite's run was killed on its first attempt and reclaimed: attempt 1 (epoch 1, by
 * `killed`, under `heldToken`) ended `lease_expired` after `outlivedMs` (the kill, or a later instant; DB clock,
 * epoch ms), and attempt 2 (epoch 2, by `reclaimedBy`) completed, claimed only once attempt 1 had ended.
 * @returns the two attempts.
 */
export function expectReclaimedAfterExpiry(
  attempts: readonly RunAttempt[],
  label: string,
  {
    killed = 'w1',
    reclaimedBy,
    heldToken,
    outlivedMs,
  }: { killed?: string; reclaimedBy: string; heldToken: string; outlivedMs: number },
): [RunAttempt, RunAttempt] {
  const ofStep = attempts.filter((a) => a.label === label);
  expect(ofStep.map((a) => [a.attempt, a.epoch, a.worker_id, a.outcome])).toEqual([
    [1, 1, killed, 'lease_expired'],
    [2, 2, reclaimedBy, 'completed'],
  ]);
  const [first, second] = ofStep as [RunAttempt, RunAttempt];
  expect(first.token).toBe(heldToken);
  // Attempt 1's lease (its end, for an expired attempt) outlived the kill, and attempt 2 came only after it.
  expect(first.ended_at_ms).toBeGreaterThan(outlivedMs);
  expect(second.claimed_at_ms).toBeGreaterThanOrEqual(first.ended_at_ms ?? Infinity);
  return [first, second];
}
