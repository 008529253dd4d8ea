/**
 * F06 — a durable sleep holds no lease (shared/cases/FAILURE-CASES.md).
 *
 * Seen in a Python task queue that modelled a delay as a leased message: every worker that died or froze
 * during the delay let the lease lapse and the task ran again. Here: step A → sleep → step B, where B writes a
 * ledger row (the `steps-with-sleep` workflow, test/fixtures/activities.ts). During the sleep W1 is SIGKILLed
 * and restarted twice and W2 and W3 start; just before the due time every worker is FROZEN (SIGSTOP) for 5 s.
 * The case's 20 s sleep is shrunk to 5 s; the shape is kept. Scale variant: 1,000 runs asleep at once on two
 * worker processes, one of which is killed and replaced by a fresh process during the sleep; their (long)
 * sleeps are then brought to an end together by moving the database clock, which every process reads.
 *
 * A restarted worker is a fresh process, spawned ahead with `deferStart` and started when the case says
 * "restart", so the sleep need not cover Node's start-up on a loaded machine.
 */
import { describe, expect, it } from 'vitest';
import { advanceClock } from '@palisade/engine/testing';
import { fixtureActivities, fixtureWorkflows } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { SHORT_RETRY, sigkill, useProcessCase } from '../support/process-case.js';
import { runRecords, sampleRuns, sleepStarted } from '../support/run-records.js';
import { pollUntil } from '../support/wait.js';

const FREEZE_MS = 5_000;
/** How long before the due time the workers are frozen: room for the test's own polling on a loaded machine. */
const FREEZE_LEAD_MS = 1_500;
const AMOUNT_CENTS = 700;

describe('F06: a durable sleep holds no lease', () => {
  const { workers, faults, config } = useProcessCase({ pollIntervalMs: 200 });

  it('keeps the due time, holds no lease while asleep through kills, restarts and a freeze; B runs once', async () => {
    const timings: FixtureTimings = { leaseMs: 2_000, retry: SHORT_RETRY };
    const sleepMs = 5_000;
    const c = await faults.setUp();
    const db = runRecords(c.sql, c.schema);
    const spawn = (id: string, deferStart: boolean) =>
      workers.spawn(config(c, id, { timings, turnLeaseMs: 2_000, deferStart }));
    const [w1, w1b, w1c, w2, w3] = await Promise.all([
      spawn('w1', false),
      spawn('w1.2', true),
      spawn('w1.3', true),
      spawn('w2', true),
      spawn('w3', true),
    ]);
    const { stepsWithSleep } = fixtureWorkflows(fixtureActivities(timings));
    const handle = await c.engine.client.start(stepsWithSleep, {
      sleepMs,
      after: ['B'],
      amountCents: AMOUNT_CENTS,
    });
    const runId = handle.runId;
    const [, timer] = await sleepStarted(db, runId);
    const dueMs = timer?.next_run_at_ms ?? NaN;
    const sampler = sampleRuns(c.sql, c.schema, [runId]);

    // The due time was fixed when the sleep started: its start plus the sleep, by the DB clock.
    const started = (await db.events(runId)).find((e) => e.type === 'timer:started');
    expect(started?.due_at_ms).toBe(dueMs);
    expect(Math.abs(dueMs - (started?.at_ms ?? NaN) - sleepMs)).toBeLessThan(50);

    // During the sleep: KILL and restart W1 twice, start W2 and W3. After each change the timer is unmoved.
    const dueTimes: (number | null)[] = [];
    const timerDue = async () => dueTimes.push((await db.steps(runId))[1]?.next_run_at_ms ?? null);
    await sigkill(w1);
    await timerDue();
    await w1b.start();
    await timerDue();
    await sigkill(w1b);
    await timerDue();
    await w1c.start();
    await w2.start();
    await w3.start();
    await timerDue();
    expect(dueTimes).toEqual([dueMs, dueMs, dueMs, dueMs]);
    expect(await db.nowMs()).toBeLessThan(dueMs - FREEZE_LEAD_MS); // all of that happened mid-sleep

    // At the due time every worker is frozen for 5 s.
    const live = [w1c, w2, w3];
    await pollUntil(db.nowMs, (now) => now >= dueMs - FREEZE_LEAD_MS, { what: 'the freeze point' });
    for (const w of live) expect(w.kill('SIGSTOP')).toBe(true);
    const frozenAtMs = await db.nowMs();
    await pollUntil(db.nowMs, (now) => now >= frozenAtMs + FREEZE_MS, {
      timeoutMs: FREEZE_MS + 10_000,
      what: 'the end of the freeze',
    });
    // Read before SIGCONT: whatever a sample saw before this, it saw while every worker was frozen.
    const thawedAtMs = await db.nowMs();
    for (const w of live) expect(w.kill('SIGCONT')).toBe(true);
    expect(frozenAtMs).toBeLessThan(dueMs); // the freeze spanned the due time
    expect(thawedAtMs).toBeGreaterThan(dueMs);

    const output = await handle.result({ timeoutMs: 30_000 });
    const samples = await sampler.stop();

    // While sleeping (and while frozen), nothing of the run was running, leased or open; the timer pended.
    const asleep = samples.filter((s) => s.atMs < thawedAtMs);
    expect(asleep.filter((s) => s.atMs < dueMs).length).toBeGreaterThanOrEqual(10);
    expect(asleep.filter((s) => s.atMs > dueMs).length).toBeGreaterThanOrEqual(10);
    for (const s of asleep) {
      expect(s).toMatchObject({
        status: 'running',
        turnLeased: false,
        runningSteps: 0,
        leasedSteps: 0,
        openAttempts: 0,
        pendingTimers: 1,
      });
    }

    // B ran once — attempt 1, one ledger row under its token — and started after the due time (and the thaw).
    const steps = await db.steps(runId);
    const b = steps[2];
    expect(steps.map((s) => [s.kind, s.label, s.status])).toEqual([
      ['activity', 'A', 'completed'],
      ['timer', null, 'completed'],
      ['activity', 'B', 'completed'],
    ]);
    expect(b).toMatchObject({ attempt: 1, epoch: 1 });
    expect(output).toEqual([
      { step: 'A', token: steps[0]?.token, workerId: 'w1' },
      { step: 'B', token: b?.token, workerId: b?.worker_id },
    ]);
    const attempts = await db.attempts(runId);
    const bAttempts = attempts.filter((a) => a.label === 'B');
    expect(bAttempts.map((a) => [a.attempt, a.token, a.outcome])).toEqual([[1, b?.token, 'completed']]);
    expect(bAttempts[0]?.claimed_at_ms).toBeGreaterThanOrEqual(thawedAtMs);
    const executions = await db.executions(runId);
    expect(executions.map((e) => [e.label, e.token])).toEqual([
      ['A', steps[0]?.token],
      ['B', b?.token],
    ]);
    expect(executions[1]?.started_at_ms).toBeGreaterThanOrEqual(dueMs);
    expect(await c.db.ledger(runId)).toEqual([
      { token: b?.token, worker_id: b?.worker_id, amount_cents: AMOUNT_CENTS },
    ]);
    const events = await db.events(runId);
    const fired = events.filter((e) => e.type === 'timer:fired');
    expect(fired).toHaveLength(1);
    expect(fired[0]?.at_ms).toBeGreaterThanOrEqual(thawedAtMs);
    // A worker alive after the sleep ran B.
    expect(['w1.3', 'w2', 'w3']).toContain(b?.worker_id);
  });

  it('gives 1,000 runs asleep at once exactly 1,000 executions of B, each once, through kills mid-sleep', async () => {
    const runs = 1_000;
    // Longer leases than above: the workers share two loaded cores with other tests, and B must keep attempt 1.
    const timings: FixtureTimings = { leaseMs: 5_000, retry: SHORT_RETRY };
    const c = await faults.setUp();
    const spawn = (id: string, deferStart = false) =>
      workers.spawn(
        config(c, id, {
          timings,
          turnLeaseMs: 5_000,
          concurrency: 20,
          workflowConcurrency: 20,
          poolSize: 5,
          deferStart,
        }),
      );
    const [w1, w2, w3] = await Promise.all([spawn('w1'), spawn('w2'), spawn('w3', true)]);
    const { stepsWithSleep } = fixtureWorkflows(fixtureActivities(timings));
    const s = (name: string) => `"${c.schema}".${name}`;
    // Long enough that all runs are asleep long before the first is due, however loaded the machine; the due
    // times are then brought forward with the engine's clock offset, read by every process alike (no attempt
    // is in flight when it moves, so no lease is shortened).
    const sleepMs = 10 * 60_000;
    await Promise.all(
      Array.from({ length: runs }, () =>
        c.engine.client.start(stepsWithSleep, { sleepMs, after: ['B'], amountCents: AMOUNT_CENTS }),
      ),
    );
    const asleep = () =>
      c.sql.unsafe<
        {
          sleeping: number;
          leased: number;
          open: number;
          first_due_ms: number;
          last_due_ms: number;
          now_ms: number;
        }[]
      >(`
        SELECT (SELECT count(*) FROM ${s('steps')} WHERE kind = 'timer' AND status = 'scheduled')::int AS sleeping,
               (SELECT count(*) FROM ${s('runs')} WHERE turn_lease_expires_at > ${s('now()')})::int
                 + (SELECT count(*) FROM ${s('steps')} WHERE lease_expires_at > ${s('now()')} AND status = 'running')::int
                 AS leased,
               (SELECT count(*) FROM ${s('attempts')} WHERE outcome IS NULL)::int AS open,
               (SELECT (extract(epoch FROM min(next_run_at)) * 1000)::float8 FROM ${s('steps')}
                 WHERE kind = 'timer') AS first_due_ms,
               (SELECT (extract(epoch FROM max(next_run_at)) * 1000)::float8 FROM ${s('steps')}
                 WHERE kind = 'timer') AS last_due_ms,
               (extract(epoch FROM ${s('now()')}) * 1000)::float8 AS now_ms`);
    const [all] = await pollUntil(asleep, ([r]) => r?.sleeping === runs, {
      timeoutMs: 120_000,
      what: `${runs} runs asleep`,
    });
    // All asleep at once, before the first of them is due; nothing is leased or open.
    expect(all).toMatchObject({ leased: 0, open: 0 });
    expect(all?.now_ms).toBeLessThan(all?.first_due_ms ?? 0);

    // Kill a worker mid-sleep and start a fresh one in its place; the sleepers are untouched.
    await sigkill(w2);
    await w3.start();
    const [afterKill] = await asleep();
    expect(afterKill).toMatchObject({ sleeping: runs, leased: 0, open: 0, first_due_ms: all?.first_due_ms });
    expect(afterKill?.last_due_ms).toBe(all?.last_due_ms);

    // Every run falls due at once.
    await advanceClock(c.engine, (afterKill?.last_due_ms ?? NaN) - (afterKill?.now_ms ?? NaN) + 100);
    await pollUntil(
      () =>
        c.sql.unsafe<{ n: number }[]>(
          `SELECT count(*)::int AS n FROM ${s('runs')} WHERE status = 'completed'`,
        ),
      ([r]) => r?.n === runs,
      { timeoutMs: 120_000, what: `${runs} runs completed` },
    );
    const [counts] = await c.sql.unsafe<Record<string, number>[]>(`
      WITH due AS (
        SELECT step_id, (data->>'dueAt')::timestamptz AS due_at, run_id FROM ${s('events')} WHERE type = 'timer:started'),
      b AS (SELECT * FROM ${s('steps')} WHERE name = 'record-step' AND input->>'step' = 'B')
      SELECT (SELECT count(*) FROM ${s('runs')} WHERE status = 'completed' AND jsonb_array_length(output) = 2)::int
               AS completed,
             (SELECT count(*) FROM ${s('executions')} WHERE label = 'B')::int AS b_executions,
             (SELECT count(DISTINCT step_id) FROM ${s('executions')} WHERE label = 'B')::int AS b_steps_executed,
             (SELECT count(DISTINCT run_id) FROM ${s('executions')} WHERE label = 'B')::int AS b_runs_executed,
             (SELECT count(*) FROM ${s('executions')} WHERE label = 'A')::int AS a_executions,
             (SELECT count(*) FROM ${s('ledger')})::int AS ledger_rows,
             (SELECT count(*) FROM b WHERE status = 'completed' AND attempt = 1 AND epoch = 1)::int AS b_first_attempt,
             (SELECT count(*) FROM ${s('attempts')} a JOIN b ON b.id = a.step_id)::int AS b_claims,
             (SELECT count(*) FROM ${s('attempts')} a JOIN b ON b.id = a.step_id JOIN due ON due.run_id = b.run_id
               WHERE a.claimed_at < due.due_at)::int AS b_claimed_early,
             (SELECT count(*) FROM ${s('events')} WHERE type = 'timer:fired')::int AS timers_fired,
             (SELECT count(*) FROM ${s('attempts')} WHERE outcome IS NULL OR outcome <> 'completed')::int
               AS attempts_not_completed`);
    expect(counts).toEqual({
      completed: runs,
      b_executions: runs,
      b_steps_executed: runs,
      b_runs_executed: runs,
      a_executions: runs,
      ledger_rows: runs,
      b_first_attempt: runs,
      b_claims: runs,
      b_claimed_early: 0,
      timers_fired: runs,
      attempts_not_completed: 0,
    });
    // Only the live workers ran B: the survivor and the fresh one.
    const bWorkers = await c.sql.unsafe<{ worker_id: string }[]>(
      `SELECT DISTINCT worker_id FROM ${s('executions')} WHERE label = 'B' ORDER BY worker_id`,
    );
    expect(bWorkers.map((r) => r.worker_id).filter((w) => w !== w1.workerId && w !== w3.workerId)).toEqual(
      [],
    );
  });
});
