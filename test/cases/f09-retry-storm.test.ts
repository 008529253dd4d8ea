/**
 * F09 — no retry storms (shared/cases/FAILURE-CASES.md).
 *
 * Seen in a Ruby queue (retries synchronized on fixed intervals) and a Postgres queue (stalled jobs reset all at
 * once, with no backoff). Shrunk from the case by 5×: 200 runs of `storm-call` (test/fixtures/activities.ts)
 * against a service (test/support/flaky-service.ts) that answers 503 for 3 s from its first request; retry
 * initial 200 ms, × 2, at most 800 ms, jitter 0.5, max attempts 10; "one second" of the case becomes 200 ms.
 * Second phase: 100 attempts in flight on two workers, both SIGKILLed, two fresh workers (spawned ahead with
 * `deferStart`, started at the kill): the reclaims (reclaim backoff initial 1 s, full jitter) fall due spread over
 * time and are granted at their due times, instead of landing in one poll. Times are the database's (attempt
 * rows, the backoff each failure persisted, the reclaim delay each claim persisted) except the service's call log.
 *
 * What is asserted follows from the retry policy; what depends on how loaded the machine is (how late grants
 * come after their due times, how the grants of a whole wave cluster) is logged, or bounded with a wide margin.
 * The case's "no one-second window holds more than 15 % of the retries" is logged, not asserted: 200 runs that
 * fail at the same instant retry within one jitter range (100 ms here), so the first wave alone can exceed 15 %
 * of all retries whatever the engine does — with the case's own numbers too (500 first retries at 0.5–1 s of
 * ~3,000). What the jitter decides — each persisted backoff and how they spread — is asserted instead.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { RetryPolicy } from '@palisade/sdk';
import { fixtureActivities } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { createFlakyService, type FlakyService } from '../support/flaky-service.js';
import { heartbeatEvery, useProcessCase } from '../support/process-case.js';
import { pollUntil } from '../support/wait.js';

/**
 * Generous lease and heartbeat: on a loaded two-core machine a 2 s lease renewed every 0.5 s was seen to lapse
 * (heartbeats late), which turns measured reclaims into reclaims of live attempts. These are not under test here.
 */
const timings: FixtureTimings = { leaseMs: 4_000 };
const HEARTBEAT_MS = 1_000;
const POLL_MS = 100;

const RUNS = 200;
const OUTAGE_MS = 3_000;
const STORM_RETRY = {
  maximumAttempts: 10,
  initialIntervalMs: 200,
  backoffCoefficient: 2,
  maximumIntervalMs: 800,
  jitter: 0.5,
} as const satisfies RetryPolicy;
/** The case's one-second window, scaled like the retry intervals (1 s → 200 ms). */
const WINDOW_MS = 200;

const IN_FLIGHT = 100;
/** Reclaim backoff after the mass kill: 1 s before attempt 2, shortened by up to 100 % at random. */
const RECLAIM_RETRY = {
  maximumAttempts: 3,
  initialIntervalMs: 1_000,
  jitter: 1,
} as const satisfies RetryPolicy;
/**
 * The share of reclaims whose due times may fall in one poll interval. Due times are lease expiry + a delay
 * uniform over 0–1 s: a 100 ms window holds ~10 % of them on average, and the busiest one 15–20 % by chance
 * with 100 samples (the expiries come in two clusters, one per killed worker's heartbeat batch; simulated, the
 * busiest window held more than 27 % in none of 20,000 draws). Without the jitter each cluster — half of the
 * reclaims — would fall due in one instant.
 */
const MAX_DUE_SHARE_PER_POLL = 0.3;
/**
 * How late a grant may come after its due time, at the median (a poll interval plus a claim round trip when the
 * machine is idle; seen up to ~1 s on a two-core machine at load 7). Far later would mean the reclaims pile up
 * and are granted together whatever the jitter did.
 */
const MAX_MEDIAN_GRANT_LAG_MS = 1_500;

/** The nominal backoff after attempt n (before jitter). */
const nominalMs = (n: number): number =>
  Math.min(
    STORM_RETRY.initialIntervalMs * STORM_RETRY.backoffCoefficient ** (n - 1),
    STORM_RETRY.maximumIntervalMs,
  );

/** The most calls one run can make within `windowMs`, if every backoff is as short as the jitter allows. */
function maxCallsWithin(windowMs: number): number {
  let calls = 1;
  let atMs = 0;
  for (let n = 1; n < STORM_RETRY.maximumAttempts; n++) {
    atMs += nominalMs(n) * (1 - STORM_RETRY.jitter);
    if (atMs >= windowMs) break;
    calls++;
  }
  return calls;
}

/** The largest number of `times` inside any window of `windowMs` (a sliding window). */
function busiestWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < sorted.length; hi++) {
    while ((sorted[hi] as number) - (sorted[lo] as number) >= windowMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
}

/** One claim of a step (an `attempts` row), times in ms by the database clock. */
interface AttemptRow {
  step_id: string;
  attempt: number;
  worker_id: string;
  outcome: string | null;
  claimed_at_ms: number;
  ended_at_ms: number | null;
}

const spread = (values: readonly number[]): number => quantile(values, 0.9) - quantile(values, 0.1);
const round = (x: number): number => Math.round(x);

describe('F09: no retry storms', () => {
  const { workers, faults, config } = useProcessCase({
    timings,
    ...heartbeatEvery(HEARTBEAT_MS),
    pollIntervalMs: POLL_MS,
    concurrency: 50,
    poolSize: 6,
  });
  const { stormCall, recordStep } = fixtureActivities(timings);
  const services: FlakyService[] = [];
  afterEach(async () => {
    await Promise.all(services.splice(0).map((s) => s.close()));
  });

  const ms = (column: string): string => `(extract(epoch FROM ${column}) * 1000)::float8`;

  it('bounds the calls of 200 runs against a service that is down by their jittered backoffs, and all complete once it is up', async () => {
    const c = await faults.setUp();
    const service = await createFlakyService({ outageMs: OUTAGE_MS });
    services.push(service);
    // Every run is due before any worker starts, so the first calls (and failures) come together.
    const storm = await Promise.all(
      ['w1', 'w2'].map((id) => workers.spawn(config(c, id, { deferStart: true }))),
    );

    const handles = await Promise.all(
      Array.from({ length: RUNS }, () =>
        c.engine.client.enqueue(stormCall, { url: service.url }, { retry: STORM_RETRY }),
      ),
    );
    await Promise.all(storm.map((w) => w.start()));
    await Promise.all(handles.map((h) => h.result({ timeoutMs: 60_000 })));

    // Every run completed, with exactly one successful call, made after the outage.
    const outage = service.outage();
    expect(outage).toBeDefined();
    const { fromMs, untilMs } = outage as { fromMs: number; untilMs: number };
    const ok = service.calls.filter((x) => x.status === 200);
    expect(ok).toHaveLength(RUNS);
    expect(new Set(ok.map((x) => x.runId)).size).toBe(RUNS);
    expect(Math.min(...ok.map((x) => x.atMs))).toBeGreaterThanOrEqual(untilMs);

    // Calls during the outage: at most what the backoff lets each run make in 3 s (runs × steps that fit).
    const failedCalls = service.calls.filter((x) => x.status === 503);
    const perRunBound = maxCallsWithin(OUTAGE_MS);
    expect(perRunBound).toBeLessThan(STORM_RETRY.maximumAttempts); // the budget outlasts the outage
    expect(failedCalls.length).toBeLessThanOrEqual(RUNS * perRunBound);
    const perRun = new Map<string, number>();
    for (const x of failedCalls) perRun.set(x.runId, (perRun.get(x.runId) ?? 0) + 1);
    expect(Math.max(...perRun.values())).toBeLessThanOrEqual(perRunBound);
    expect(failedCalls.every((x) => x.atMs >= fromMs && x.atMs < untilMs)).toBe(true);
    // The storm happened: a run's first call fails if it is made within 3 s of the first call of all, which on
    // a loaded machine is not certain for every run (100 slots for 200 runs), but is for most.
    expect(perRun.size, 'runs that called during the outage').toBeGreaterThanOrEqual(RUNS / 2);

    // The database agrees: each failed call is one `failed` attempt, and each run one `completed` attempt.
    const attempts = await c.sql.unsafe<{ attempt: number; outcome: string; claimed_at_ms: number }[]>(
      `SELECT attempt, outcome, ${ms('claimed_at')} AS claimed_at_ms FROM "${c.schema}".attempts`,
    );
    const outcomes: Record<string, number> = {};
    for (const a of attempts) outcomes[a.outcome] = (outcomes[a.outcome] ?? 0) + 1;
    // (A grant that arrived too late on a loaded machine is released unstarted or expires: it made no call.)
    expect(outcomes).toMatchObject({ completed: RUNS, failed: failedCalls.length });

    // Each failure was retried (the budget outlasts the outage), after a backoff the engine persisted
    // (retryAt − the event's time, read a few ms apart in one statement): within [nominal × (1 − jitter),
    // nominal] and, after one attempt number, spread over that range rather than all equal.
    const backoffs = await c.sql.unsafe<{ attempt: number; delay_ms: number; due_at_ms: number }[]>(
      `SELECT attempt, ${ms(`(data->>'retryAt')::timestamptz`)} - ${ms('at')} AS delay_ms,
              ${ms(`(data->>'retryAt')::timestamptz`)} AS due_at_ms
         FROM "${c.schema}".events WHERE type = 'attempt:failed'`,
    );
    expect(backoffs).toHaveLength(failedCalls.length);
    for (const b of backoffs) {
      expect(b.delay_ms).toBeGreaterThanOrEqual(nominalMs(b.attempt) * (1 - STORM_RETRY.jitter) - 50);
      expect(b.delay_ms).toBeLessThanOrEqual(nominalMs(b.attempt) + 1);
    }
    const first = backoffs.filter((b) => b.attempt === 1).map((b) => b.delay_ms);
    expect(first.length).toBeLessThanOrEqual(perRun.size);
    expect(first.length).toBeGreaterThanOrEqual(RUNS / 2);
    expect(spread(first)).toBeGreaterThanOrEqual(0.5 * STORM_RETRY.jitter * nominalMs(1));

    // The case's window figure, logged (see the header): for the grants of the retries and their due times.
    const retries = attempts.filter((a) => a.attempt >= 2).map((a) => a.claimed_at_ms);
    const dues = backoffs.map((b) => b.due_at_ms);
    console.info(
      `F09 storm: ${failedCalls.length} failed calls (bound ${RUNS * perRunBound}) from ${perRun.size} runs; ` +
        `busiest ${WINDOW_MS} ms window holds ${busiestWindow(retries, WINDOW_MS)} of ${retries.length} ` +
        `retry grants, ${busiestWindow(dues, WINDOW_MS)} of ${dues.length} retry due times`,
    );
  });

  it('gives the reclaims of 100 attempts whose workers were all SIGKILLed jittered due times, and grants each at its own', async () => {
    const c = await faults.setUp();
    const [w1, w2, fresh1, fresh2] = await Promise.all([
      workers.spawn(config(c, 'w1')),
      workers.spawn(config(c, 'w2')),
      workers.spawn(config(c, 'w3', { deferStart: true })),
      workers.spawn(config(c, 'w4', { deferStart: true })),
    ]);
    const handles = await Promise.all(
      Array.from({ length: IN_FLIGHT }, (_, i) =>
        c.engine.client.enqueue(
          recordStep,
          { step: `s${i}`, hold: { ms: 60_000, onEpoch: 1 } },
          { retry: RECLAIM_RETRY },
        ),
      ),
    );
    // All 100 first attempts are running (each wrote its executions row) on W1 and W2.
    await pollUntil(
      async () => {
        const [row] = await c.sql.unsafe<{ n: number }[]>(
          `SELECT count(*)::int AS n FROM "${c.schema}".executions`,
        );
        return row?.n ?? 0;
      },
      (n) => n >= IN_FLIGHT,
      { what: 'all attempts in flight', timeoutMs: 20_000 },
    );
    for (const w of [w1, w2]) expect(w.kill('SIGKILL')).toBe(true);
    await Promise.all([w1.exited, w2.exited]);
    // The fresh workers start now, seconds before the first lease can expire, so what is measured is when the
    // engine makes the reclaims due and grants them, not how long a Node process takes to start.
    const started = Promise.all([fresh1.start(), fresh2.start()]);

    // The reclaim delay each first claim drew (retry_delay_ms at claim; heartbeats keep it, moving only the
    // lease). Read before any lease expired: all 100 still attempt 1 of W1 or W2, none reclaimable yet.
    const claimed = await c.sql.unsafe<
      {
        step_id: string;
        status: string;
        attempt: number;
        worker_id: string;
        reclaim_delay_ms: number;
        due_in_ms: number;
      }[]
    >(
      `SELECT id::text AS step_id, status, attempt, worker_id, reclaim_delay_ms,
              ${ms('next_run_at')} - ${ms(`"${c.schema}"."now"()`)} AS due_in_ms
         FROM "${c.schema}".steps`,
    );
    await started;
    expect(claimed).toHaveLength(IN_FLIGHT);
    for (const s of claimed) {
      expect(s).toMatchObject({ status: 'running', attempt: 1 });
      expect(['w1', 'w2']).toContain(s.worker_id);
      expect(s.due_in_ms).toBeGreaterThan(0);
    }
    await Promise.all(handles.map((h) => h.result({ timeoutMs: 30_000 })));

    const rows = await c.sql.unsafe<AttemptRow[]>(
      `SELECT step_id::text, attempt, worker_id, outcome, ${ms('claimed_at')} AS claimed_at_ms,
              ${ms('ended_at')} AS ended_at_ms
         FROM "${c.schema}".attempts ORDER BY step_id, fencing_token`,
    );
    const stale = await c.sql.unsafe<
      { worker_id: string; attempt: number; operation: string; reason: string }[]
    >(
      `SELECT worker_id, attempt, data->>'operation' AS operation, data->>'reason' AS reason
         FROM "${c.schema}".events WHERE type = 'attempt:stale-rejected'`,
    );

    // Outcomes that hold however loaded the machine: each step completed exactly once, by a fresh worker,
    // within its attempt budget; each first attempt ended with its lease (its worker was dead).
    const byStep = new Map<string, AttemptRow[]>();
    for (const r of rows) byStep.set(r.step_id, [...(byStep.get(r.step_id) ?? []), r]);
    expect(byStep.size).toBe(IN_FLIGHT);
    for (const attempts of byStep.values()) {
      expect(attempts.length).toBeLessThanOrEqual(RECLAIM_RETRY.maximumAttempts);
      const completed = attempts.filter((a) => a.outcome === 'completed');
      expect(completed).toHaveLength(1);
      expect(['w3', 'w4']).toContain(completed[0]?.worker_id);
      expect(attempts[0]).toMatchObject({ attempt: 1, outcome: 'lease_expired' });
      expect(['w1', 'w2']).toContain(attempts[0]?.worker_id);
      expect(attempts[1]?.attempt).toBe(2);
      expect(['w3', 'w4']).toContain(attempts[1]?.worker_id);
    }

    // Each reclaim's due time, as the engine persisted it: the first attempt's lease expiry (its ended_at)
    // plus the reclaim delay drawn at its claim — within 0 … 1 s and spread over that range.
    const delays = new Map(claimed.map((s) => [s.step_id, s.reclaim_delay_ms]));
    const reclaims = [...byStep].map(([stepId, attempts]) => {
      const [killed, reclaim] = attempts as [AttemptRow, AttemptRow];
      const delayMs = delays.get(stepId) ?? NaN;
      const expiredAtMs = killed.ended_at_ms ?? NaN;
      return { delayMs, expiredAtMs, dueAtMs: expiredAtMs + delayMs, grantedAtMs: reclaim.claimed_at_ms };
    });
    for (const r of reclaims) {
      expect(r.delayMs).toBeGreaterThanOrEqual(0);
      expect(r.delayMs).toBeLessThanOrEqual(RECLAIM_RETRY.initialIntervalMs);
    }
    const delaySpread = spread(reclaims.map((r) => r.delayMs));
    expect(delaySpread).toBeGreaterThanOrEqual(0.5 * RECLAIM_RETRY.initialIntervalMs * RECLAIM_RETRY.jitter);
    // So the due times do not bunch: no poll interval holds more than the jitter range allows (with margin).
    const dues = reclaims.map((r) => r.dueAtMs);
    const busiestDue = busiestWindow(dues, POLL_MS);
    expect(
      busiestDue / IN_FLIGHT,
      `${busiestDue} of ${IN_FLIGHT} reclaims due in ${POLL_MS} ms`,
    ).toBeLessThanOrEqual(MAX_DUE_SHARE_PER_POLL);

    // Each grant came at or after its own due time (one DB clock), and not long after it: the grants follow
    // the spread of the due times instead of piling up into one poll.
    const lags = reclaims.map((r) => r.grantedAtMs - r.dueAtMs);
    // No grant before its due time. A few ms of slack: one CI run saw a grant 1.9 ms before the due time
    // computed here (expiry + delay, read back as float ms); not explained yet, and far below what a storm is.
    for (const lag of lags) expect(lag).toBeGreaterThanOrEqual(-5);
    expect(quantile(lags, 0.5)).toBeLessThanOrEqual(MAX_MEDIAN_GRANT_LAG_MS);

    const grants = reclaims.map((r) => r.grantedAtMs);
    expect(spread(grants), 'p10–p90 spread of the grants (ms)').toBeGreaterThanOrEqual(
      0.4 * RECLAIM_RETRY.initialIntervalMs * RECLAIM_RETRY.jitter,
    );
    console.info(
      `F09 reclaims: busiest ${POLL_MS} ms window holds ${busiestWindow(
        reclaims.map((r) => r.expiredAtMs),
        POLL_MS,
      )} ` +
        `lease expiries, ${busiestDue} due times, ${busiestWindow(grants, POLL_MS)} grants of ${IN_FLIGHT}; ` +
        `delay p10–p90 spread ${round(delaySpread)} ms, grants ${round(spread(grants))} ms; grant lag after due ` +
        `p50 ${round(quantile(lags, 0.5))} / p90 ${round(quantile(lags, 0.9))} / max ${round(Math.max(...lags))} ms; ` +
        `stale rejections ${JSON.stringify(stale)}`,
    );
  });
});
