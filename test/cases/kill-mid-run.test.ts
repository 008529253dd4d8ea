/**
 * Issue 3: a worker process killed in the middle of a run — mid-activity, mid-turn, mid-sleep — and the run
 * finishes on another worker with no completed step executed again.
 *
 * The run is `steps-with-sleep` (test/fixtures/activities.ts): step A → sleep → step B → step C, each step a
 * `record-step` whose attempts each write one `executions` row, fenced, when they start. W1 and W2 are separate
 * worker processes on one database; W1 runs the run alone until the fault point, then W2 starts serving and W1
 * is SIGKILLed and never comes back. Fault points, each announced by the code that reached it (no timing
 * guesses): (a) B's first attempt is holding, its lease live; (b) the workflow turn that has seen B's result
 * BLOCKs its event loop before it schedules C (`ctx.info.turnAttempt` 4, so W2's replay does not block);
 * (c) the run is asleep (its timer is pending, nothing holds a lease). A sampler of the database also checks
 * that the run never sat unfinished with nothing holding it (no live lease, no pending timer) for longer than
 * a lease plus the poll interval.
 */
import { describe, expect, it } from 'vitest';
import {
  CRASH_TIMINGS,
  CRASH_TURN_LEASE_MS,
  expectReclaimedAfterExpiry,
  sigkillAt,
  useCrashSuite,
} from '../support/crash-suite.js';
import type { StepResult } from '../support/process-case.js';
import {
  expectNeverUnownedLonger,
  sampleRuns,
  sleepStarted,
  type RunAttempt,
  type RunRecords,
} from '../support/run-records.js';
import type { WorkerProcess } from '../support/worker-process.js';

const POLL_MS = 200;
/** Long enough that the fault, not the end of the hold or block, ends it. */
const FOREVER_MS = 60_000;
/** Turns of a `steps-with-sleep` run up to the one that has seen B's result: A, the sleep, B, then C. */
const TURN_AFTER_B = 4;

describe('issue 3: a worker killed mid-run; the run finishes on another worker', () => {
  const {
    setUpPair: setUp,
    workflows: { stepsWithSleep },
  } = useCrashSuite({ pollIntervalMs: POLL_MS });

  /** W2 starts serving while W1 is still alive at its fault point; then W1 is SIGKILLed. @returns DB time of the kill. */
  async function killW1(db: RunRecords, w1: WorkerProcess, w2: WorkerProcess): Promise<number> {
    await w2.start();
    return sigkillAt(db, w1);
  }

  /** Each of the steps A, B and C ran in one attempt. */
  function expectOneAttemptEach(attempts: RunAttempt[]): void {
    expect(attempts.filter((a) => a.kind === 'activity').map((a) => [a.label, a.attempt])).toEqual([
      ['A', 1],
      ['B', 1],
      ['C', 1],
    ]);
  }

  /**
   * What every case must end with: the output holds each step's result from the attempt that completed it;
   * each step that completed before the kill has exactly one `executions` row (under the token its result
   * carries); the killed step (if any) has one row per attempt; every claim ended; tokens grow in claim order.
   */
  async function expectFinishedWithoutReexecution(
    db: RunRecords,
    runId: string,
    output: StepResult[],
    expected: { A: string; B: string; C: string },
  ): Promise<RunAttempt[]> {
    expect(output.map((r) => [r.step, r.workerId])).toEqual([
      ['A', expected.A],
      ['B', expected.B],
      ['C', expected.C],
    ]);
    const steps = await db.steps(runId);
    expect(steps.map((s) => [s.seq, s.kind, s.label, s.status])).toEqual([
      [0, 'activity', 'A', 'completed'],
      [1, 'timer', null, 'completed'],
      [2, 'activity', 'B', 'completed'],
      [3, 'activity', 'C', 'completed'],
    ]);
    // Each recorded result is the one its completing attempt returned.
    for (const s of steps.filter((x) => x.kind === 'activity')) {
      expect(output.find((r) => r.step === s.label)).toMatchObject({ token: s.token, workerId: s.worker_id });
    }
    const executions = await db.executions(runId);
    for (const s of steps.filter((x) => x.kind === 'activity')) {
      const rows = executions.filter((e) => e.step_id === s.id);
      // The last execution is the attempt that completed the step; earlier ones (only for a killed step) ran
      // under older tokens.
      expect(rows.at(-1)).toMatchObject({ label: s.label, token: s.token, worker_id: s.worker_id });
      expect(rows).toHaveLength(s.attempt);
    }
    const attempts = await db.attempts(runId);
    expect(attempts.filter((a) => a.outcome === null)).toEqual([]);
    const tokens = attempts.map((a) => BigInt(a.token));
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]).toBeGreaterThan(tokens[i - 1] as bigint);
    return attempts;
  }

  it('(a) mid-activity: W2 reclaims the killed attempt after its lease expired (attempt 2); A and C run once', async () => {
    const { c, db, w1, w2 } = await setUp();
    const handle = await c.engine.client.start(stepsWithSleep, {
      sleepMs: 500,
      after: ['B', 'C'],
      hold: { step: 'B', ms: FOREVER_MS, onEpoch: 1 },
    });
    const runId = handle.runId;
    const sampler = sampleRuns(c.sql, c.schema, [runId]);
    const holding = await w1.waitFor('fixture:holding', (m) => m.attempt.runId === runId);
    expect(holding.step).toBe('B');
    const killedAtMs = await killW1(db, w1, w2);

    const output = await handle.result({ timeoutMs: 30_000 });
    const attempts = await expectFinishedWithoutReexecution(db, runId, output, { A: 'w1', B: 'w2', C: 'w2' });

    const [b1, b2] = expectReclaimedAfterExpiry(attempts, 'B', {
      reclaimedBy: 'w2',
      heldToken: holding.attempt.token,
      outlivedMs: killedAtMs,
    });
    expect(
      (await db.executions(runId)).filter((e) => e.label === 'B').map((e) => [e.token, e.worker_id]),
    ).toEqual([
      [b1.token, 'w1'],
      [b2.token, 'w2'],
    ]);
    // W1 died before the outcome of B; every other attempt ran once.
    expect(w1.all('attempt:completed', (m) => m.attempt.token === b1.token)).toEqual([]);
    expect(attempts.filter((a) => a.kind === 'activity' && a.label !== 'B').map((a) => a.attempt)).toEqual([
      1, 1,
    ]);
    await expectNeverUnownedLonger(sampler, CRASH_TIMINGS.leaseMs + POLL_MS);
  });

  it('(b) mid-turn: W2 replays the killed turn after its lease expired and schedules C; A and B run once', async () => {
    const { c, db, w1, w2 } = await setUp();
    const handle = await c.engine.client.start(stepsWithSleep, {
      sleepMs: 500,
      after: ['B', 'C'],
      blockTurn: { turnAttempt: TURN_AFTER_B, ms: FOREVER_MS },
    });
    const runId = handle.runId;
    const sampler = sampleRuns(c.sql, c.schema, [runId]);
    const blocking = await w1.waitFor('fixture:turn-blocking', (m) => m.runId === runId);
    expect(blocking.turnAttempt).toBe(TURN_AFTER_B);
    // The turn holds its lease and has committed nothing: C does not exist yet.
    const [run] = await c.sql.unsafe<{ turn_worker_id: string; turn_attempt: number; leased: boolean }[]>(
      `SELECT turn_worker_id, turn_attempt, turn_lease_expires_at > "${c.schema}".now() AS leased
         FROM "${c.schema}".runs WHERE id = $1`,
      [runId],
    );
    expect(run).toEqual({ turn_worker_id: 'w1', turn_attempt: TURN_AFTER_B, leased: true });
    expect((await db.steps(runId)).map((s) => s.label ?? s.kind)).toEqual(['A', 'timer', 'B']);
    const killedAtMs = await killW1(db, w1, w2);

    const output = await handle.result({ timeoutMs: 30_000 });
    const attempts = await expectFinishedWithoutReexecution(db, runId, output, { A: 'w1', B: 'w1', C: 'w2' });
    expectOneAttemptEach(attempts);

    const turns = attempts.filter((a) => a.kind === 'turn');
    expect(turns.map((t) => [t.attempt, t.worker_id, t.outcome])).toEqual([
      [1, 'w1', 'completed'],
      [2, 'w1', 'completed'],
      [3, 'w1', 'completed'],
      [TURN_AFTER_B, 'w1', 'lease_expired'],
      [TURN_AFTER_B + 1, 'w2', 'completed'],
      [TURN_AFTER_B + 2, 'w2', 'completed'],
    ]);
    const killed = turns[TURN_AFTER_B - 1] as RunAttempt;
    const replay = turns[TURN_AFTER_B] as RunAttempt;
    // The killed turn's lease ran from its claim for CRASH_TURN_LEASE_MS, past the kill; the replay came after that.
    expect(killed.claimed_at_ms + CRASH_TURN_LEASE_MS).toBeGreaterThan(killedAtMs);
    expect(replay.claimed_at_ms).toBeGreaterThanOrEqual(killed.claimed_at_ms + CRASH_TURN_LEASE_MS);
    // W2's replay did not block (it is attempt 5): it committed the turn that scheduled C.
    expect(w2.all('fixture:turn-blocking')).toEqual([]);
    expect(w2.all('turn:committed', (m) => m.runId === runId).map((m) => m.outcome)).toEqual([
      'blocked',
      'completed',
    ]);
    await expectNeverUnownedLonger(sampler, CRASH_TURN_LEASE_MS + POLL_MS);
  });

  it('(c) mid-sleep: W2 fires the timer at its due time and runs B and C; A runs once', async () => {
    const { c, db, w1, w2 } = await setUp();
    const sleepMs = 3_000;
    const handle = await c.engine.client.start(stepsWithSleep, { sleepMs, after: ['B', 'C'] });
    const runId = handle.runId;
    const sampler = sampleRuns(c.sql, c.schema, [runId]);
    const [, timer] = await sleepStarted(db, runId);
    const dueMs = timer?.next_run_at_ms ?? NaN;
    const killedAtMs = await killW1(db, w1, w2);
    // The kill was mid-sleep: before the due time, with no lease held by anyone.
    expect(killedAtMs).toBeLessThan(dueMs);
    const asleep = await db.attempts(runId);
    expect(asleep.filter((a) => a.outcome === null)).toEqual([]);

    const output = await handle.result({ timeoutMs: 30_000 });
    const attempts = await expectFinishedWithoutReexecution(db, runId, output, { A: 'w1', B: 'w2', C: 'w2' });
    expectOneAttemptEach(attempts);
    // The timer fired once, on W2's turn, at or after its due time (DB clock); B was claimed after that.
    const events = await db.events(runId);
    const fired = events.filter((e) => e.type === 'timer:fired');
    expect(fired).toHaveLength(1);
    expect(fired[0]?.at_ms).toBeGreaterThanOrEqual(dueMs);
    expect(attempts.find((a) => a.label === 'B')?.claimed_at_ms).toBeGreaterThanOrEqual(dueMs);
    expect(attempts.filter((a) => a.kind === 'turn').map((t) => t.worker_id)).toEqual([
      'w1',
      'w1',
      'w2',
      'w2',
      'w2',
    ]);
    // W1 died with the run's workflow instance kept (its second turn continued it); W2 never had it: it replayed
    // the history in full, then continued its own instance.
    expect(w1.all('turn:committed', (m) => m.runId === runId).map((m) => m.replay)).toEqual([
      'full',
      'continued',
    ]);
    expect(w2.all('turn:committed', (m) => m.runId === runId).map((m) => m.replay)).toEqual([
      'full',
      'continued',
      'continued',
    ]);
    await expectNeverUnownedLonger(sampler, CRASH_TIMINGS.leaseMs + POLL_MS);
  });
});
