/**
 * F07 — nothing is acknowledged before it is durable; recovery is continuous (shared/cases/FAILURE-CASES.md).
 *
 * Seen in a TypeScript workflow kit that acknowledged a job before its work was durable: a run whose worker
 * crashed during a sleep never resumed. Here, on the `steps-with-sleep` workflow (test/fixtures/activities.ts;
 * step1 = A, step2 = B, each a `record-step` that writes one fenced `executions` row per attempt):
 * (a) A → sleep 4 s → B; the only worker is SIGKILLed 1 s into the sleep and restarted after the due time:
 *     B starts within one poll interval of the restart, A is not run again;
 * (b) a long activity (A holds 3 s, heartbeating, L = 2 s) SIGKILLed mid-way and restarted at once: the
 *     restarted worker reclaims only after the lease expired, as attempt 2;
 * (c) both at once while W2 is running, and the killed worker never returns: W2 finishes both runs.
 * In each, a sampler of the database checks that no run sits unfinished without a live lease or a pending
 * timer for longer than L + the poll interval. Timings are shrunk from the case's; the shape is kept.
 *
 * A restarted worker is a fresh process, spawned ahead with `deferStart` and started when the case says
 * "restart", so the bound on B's start measures the engine, not Node's start-up.
 */
import { describe, expect, it } from 'vitest';
import {
  CRASH_TIMINGS,
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
  type RunSampler,
} from '../support/run-records.js';
import { pollUntil } from '../support/wait.js';

const POLL_MS = 500;
const SLEEP_MS = 4_000;
const HOLD_MS = 3_000;
/** Slack for IPC, scheduling and query latency on a loaded two-core machine, added to every timing bound. */
const MARGIN_MS = 2_000;

describe('F07: recovery after a crash is continuous', () => {
  const {
    setUpPair,
    workflows: { stepsWithSleep },
  } = useCrashSuite({ pollIntervalMs: POLL_MS });

  /** The sleep of `runId` has started: its timer's start and due time (DB clock). */
  async function timerStarted(
    db: RunRecords,
    runId: string,
  ): Promise<{ startedAtMs: number; dueMs: number }> {
    await sleepStarted(db, runId);
    const started = (await db.events(runId)).find((e) => e.type === 'timer:started');
    return { startedAtMs: started?.at_ms ?? NaN, dueMs: started?.due_at_ms ?? NaN };
  }

  /** No run sat unfinished with nothing holding it (no live lease, no pending timer) for > L + poll. */
  const expectNeverUnowned = (sampler: RunSampler) =>
    expectNeverUnownedLonger(sampler, CRASH_TIMINGS.leaseMs + POLL_MS);

  /** A and B each completed; A has one execution and one attempt (never re-run); the output is theirs. */
  async function expectAOnce(db: RunRecords, runId: string, output: StepResult[]): Promise<RunAttempt[]> {
    const steps = await db.steps(runId);
    expect(steps.map((s) => [s.kind, s.label, s.status])).toEqual([
      ['activity', 'A', 'completed'],
      ['timer', null, 'completed'],
      ['activity', 'B', 'completed'],
    ]);
    expect(output).toEqual(
      steps
        .filter((s) => s.kind === 'activity')
        .map((s) => ({ step: s.label, token: s.token, workerId: s.worker_id })),
    );
    const executions = await db.executions(runId);
    expect(executions.filter((e) => e.label === 'A').map((e) => e.token)).toEqual([steps[0]?.token]);
    const attempts = await db.attempts(runId);
    expect(attempts.filter((a) => a.outcome === null)).toEqual([]);
    return attempts;
  }

  it('(a) resumes a run whose only worker was killed mid-sleep: B starts within a poll interval of the restart', async () => {
    const { c, db, w1, w2: restarted } = await setUpPair('w1', 'w1.2');
    const handle = await c.engine.client.start(stepsWithSleep, { sleepMs: SLEEP_MS, after: ['B'] });
    const runId = handle.runId;
    const sampler = sampleRuns(c.sql, c.schema, [runId]);
    const { startedAtMs, dueMs } = await timerStarted(db, runId);

    await pollUntil(db.nowMs, (now) => now >= startedAtMs + 1_000, { what: '1 s into the sleep' });
    const killedAtMs = await sigkillAt(db, w1);
    expect(killedAtMs).toBeLessThan(dueMs);
    // Restart after the due time (the case restarts at 15 s of a 5 s sleep): nothing ran meanwhile.
    await pollUntil(db.nowMs, (now) => now >= dueMs + 1_000, { what: 'past the due time' });
    const restartAtMs = await db.nowMs();
    await restarted.start();

    const output = await handle.result({ timeoutMs: 30_000 });
    const attempts = await expectAOnce(db, runId, output);
    const b = attempts.filter((a) => a.label === 'B');
    expect(b.map((a) => [a.attempt, a.worker_id, a.outcome])).toEqual([[1, 'w1.2', 'completed']]);
    expect(b[0]?.claimed_at_ms).toBeGreaterThanOrEqual(restartAtMs);
    expect((b[0]?.claimed_at_ms ?? NaN) - restartAtMs).toBeLessThanOrEqual(POLL_MS + MARGIN_MS);
    const fired = (await db.events(runId)).filter((e) => e.type === 'timer:fired');
    expect(fired).toHaveLength(1);
    expect(fired[0]?.at_ms).toBeGreaterThanOrEqual(restartAtMs);
    expect(attempts.filter((a) => a.worker_id === 'w1').map((a) => a.kind)).toEqual([
      'turn',
      'activity',
      'turn',
    ]);
    await expectNeverUnowned(sampler);
  });

  it('(b) reclaims a long activity killed mid-way only after its lease expired: attempt 2 on the restarted worker', async () => {
    const { c, db, w1, w2: restarted } = await setUpPair('w1', 'w1.2');
    const handle = await c.engine.client.start(stepsWithSleep, {
      sleepMs: 100,
      after: ['B'],
      hold: { step: 'A', ms: HOLD_MS },
    });
    const runId = handle.runId;
    const sampler = sampleRuns(c.sql, c.schema, [runId]);
    const holding = await w1.waitFor('fixture:holding', (m) => m.attempt.runId === runId);
    // Mid-way: the lease has been renewed at least once since the activity started holding.
    await w1.waitFor('heartbeat:sent', (m) => m.renewed > 0 && m.wallMs > holding.wallMs + 100);
    const killedAtMs = await sigkillAt(db, w1);
    const restartAtMs = await db.nowMs();
    await restarted.start();

    const output = await handle.result({ timeoutMs: 30_000 });
    const steps = await db.steps(runId);
    expect(steps.map((s) => [s.label ?? s.kind, s.status, s.attempt])).toEqual([
      ['A', 'completed', 2],
      ['timer', 'completed', 0],
      ['B', 'completed', 1],
    ]);
    const attempts = await db.attempts(runId);
    // The lease outlived both the kill and the restart; the reclaim came after it expired, promptly.
    expect(restartAtMs).toBeGreaterThanOrEqual(killedAtMs);
    const [a1, a2] = expectReclaimedAfterExpiry(attempts, 'A', {
      reclaimedBy: 'w1.2',
      heldToken: holding.attempt.token,
      outlivedMs: restartAtMs,
    });
    expect(a2.claimed_at_ms - (a1.ended_at_ms ?? NaN)).toBeLessThanOrEqual(POLL_MS + MARGIN_MS);
    expect(BigInt(a2.token)).toBeGreaterThan(BigInt(a1.token));
    // Both attempts started (one executions row each, under their own tokens); the second ran to the end.
    expect((await db.executions(runId)).map((e) => [e.label, e.token, e.worker_id])).toEqual([
      ['A', a1.token, 'w1'],
      ['A', a2.token, 'w1.2'],
      ['B', steps[2]?.token, 'w1.2'],
    ]);
    expect(output.map((r) => [r.step, r.token])).toEqual([
      ['A', a2.token],
      ['B', steps[2]?.token],
    ]);
    expect(restarted.all('fixture:ended', (m) => m.attempt.token === a2.token)).toMatchObject([
      { outcome: 'returned' },
    ]);
    await expectNeverUnowned(sampler);
  });

  it('(c) W2 finishes a run killed mid-sleep and one killed mid-activity; the killed worker never returns', async () => {
    const { c, db, w1, w2 } = await setUpPair();
    // The sleeper first; once it sleeps, the long activity.
    const sleeper = await c.engine.client.start(stepsWithSleep, { sleepMs: SLEEP_MS, after: ['B'] });
    const { startedAtMs, dueMs } = await timerStarted(db, sleeper.runId);
    const longJob = await c.engine.client.start(stepsWithSleep, {
      sleepMs: 100,
      after: ['B'],
      // Held on its first attempt well past the kill, however slow the machine; attempt 2 returns at once.
      hold: { step: 'A', ms: 20_000, onEpoch: 1 },
    });
    const sampler = sampleRuns(c.sql, c.schema, [sleeper.runId, longJob.runId]);
    const holding = await w1.waitFor('fixture:holding', (m) => m.attempt.runId === longJob.runId);
    await w1.waitFor('heartbeat:sent', (m) => m.renewed > 0 && m.wallMs > holding.wallMs + 100);
    await pollUntil(db.nowMs, (now) => now >= startedAtMs + 1_000, { what: '1 s into the sleep' });
    await w2.start();
    expect(w1.all('fixture:ended', (m) => m.attempt.runId === longJob.runId)).toEqual([]); // still mid-way
    const killedAtMs = await sigkillAt(db, w1);
    expect(killedAtMs).toBeLessThan(dueMs);

    const [sleptOutput, longJobOutput] = await Promise.all([
      sleeper.result({ timeoutMs: 30_000 }),
      longJob.result({ timeoutMs: 30_000 }),
    ]);

    // The sleeper: W2 fired the timer at its due time and ran B promptly; A was not run again.
    const slept = await expectAOnce(db, sleeper.runId, sleptOutput);
    const b = slept.filter((a) => a.label === 'B');
    expect(b.map((a) => [a.attempt, a.worker_id])).toEqual([[1, 'w2']]);
    expect(b[0]?.claimed_at_ms).toBeGreaterThanOrEqual(dueMs);
    expect((b[0]?.claimed_at_ms ?? NaN) - dueMs).toBeLessThanOrEqual(POLL_MS + MARGIN_MS);

    // The long activity: W2 reclaimed it after its lease expired, as attempt 2, and ran B.
    const longJobAttempts = await db.attempts(longJob.runId);
    expect(
      longJobAttempts
        .filter((a) => a.kind === 'activity')
        .map((a) => [a.label, a.attempt, a.worker_id, a.outcome]),
    ).toEqual([
      ['A', 1, 'w1', 'lease_expired'],
      ['A', 2, 'w2', 'completed'],
      ['B', 1, 'w2', 'completed'],
    ]);
    const [a1, a2] = longJobAttempts.filter((a) => a.label === 'A') as [RunAttempt, RunAttempt];
    expect(a1.ended_at_ms).toBeGreaterThan(killedAtMs);
    expect(a2.claimed_at_ms).toBeGreaterThanOrEqual(a1.ended_at_ms ?? Infinity);
    expect(longJobOutput.map((r) => [r.step, r.workerId])).toEqual([
      ['A', 'w2'],
      ['B', 'w2'],
    ]);
    expect((await db.executions(longJob.runId)).map((e) => [e.label, e.worker_id])).toEqual([
      ['A', 'w1'],
      ['A', 'w2'],
      ['B', 'w2'],
    ]);
    await expectNeverUnowned(sampler);
  });
});
