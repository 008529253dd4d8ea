/**
 * Readers of a multi-step workflow run's rows, and a sampler of run liveness, for the process-based cases that
 * kill workers in the middle of a run (test/cases/kill-mid-run, f06, f07). Plain SQL on the engine's tables in
 * `schema` (no engine code), times as epoch ms by the database clock (`<schema>.now()`), so expectations are
 * checked against what the database recorded. The one-step readers are in ./fault-case.ts.
 */
import type postgres from '@palisade/engine/postgres';
import { expect } from 'vitest';
import { type AttemptRecord } from './fault-case.js';
import { pollUntil } from './wait.js';

/** One step of a run. `label` is the `step` input of a `record-step` call (A, B, …), null for other kinds. */
export interface RunStep {
  id: string;
  seq: number;
  kind: string;
  name: string;
  label: string | null;
  status: string;
  attempt: number;
  epoch: number;
  token: string | null;
  worker_id: string | null;
  next_run_at_ms: number | null;
  lease_expires_at_ms: number | null;
}

/** One claim of the run: a workflow turn (`kind = 'turn'`, no step) or an activity step. */
export interface RunAttempt extends AttemptRecord {
  kind: 'turn' | 'activity';
  seq: number | null;
  label: string | null;
}

/** One `executions` row (written fenced at the start of a `record-step` or `awaited-io` attempt). */
export interface Execution {
  label: string | null;
  step_id: string;
  token: string;
  worker_id: string;
  started_at_ms: number;
}

/** One entry of the run's history, with the due time of a timer (`timer:started`'s `dueAt`). */
export interface RunEvent {
  type: string;
  step_id: string | null;
  token: string | null;
  worker_id: string | null;
  due_at_ms: number | null;
  at_ms: number;
}

export interface RunRecords {
  /** The run's steps in position order. */
  steps: (runId: string) => Promise<RunStep[]>;
  /** Every claim of the run (turns and steps), in claim order. */
  attempts: (runId: string) => Promise<RunAttempt[]>;
  executions: (runId: string) => Promise<Execution[]>;
  events: (runId: string) => Promise<RunEvent[]>;
  /** The database time (`<schema>.now()`), epoch ms. */
  nowMs: () => Promise<number>;
}

const ms = (column: string): string => `(extract(epoch FROM ${column}) * 1000)::float8`;

export function runRecords(sql: postgres.Sql, schema: string): RunRecords {
  const t = (name: string): string => `"${schema}"."${name}"`;
  return {
    steps: (runId) =>
      sql.unsafe<RunStep[]>(
        `SELECT id::text, seq, kind, name, CASE WHEN name = 'record-step' THEN input->>'step' END AS label, status,
                attempt, epoch, fencing_token::text AS token, worker_id,
                ${ms('next_run_at')} AS next_run_at_ms, ${ms('lease_expires_at')} AS lease_expires_at_ms
           FROM ${t('steps')} WHERE run_id = $1 ORDER BY seq`,
        [runId],
      ),
    attempts: (runId) =>
      sql.unsafe<RunAttempt[]>(
        `SELECT a.kind, s.seq, CASE WHEN s.name = 'record-step' THEN s.input->>'step' END AS label, a.attempt,
                a.epoch, a.fencing_token::text AS token, a.worker_id, a.outcome,
                ${ms('a.claimed_at')} AS claimed_at_ms, ${ms('a.ended_at')} AS ended_at_ms
           FROM ${t('attempts')} a LEFT JOIN ${t('steps')} s ON s.id = a.step_id
          WHERE a.run_id = $1 ORDER BY a.claimed_at, a.fencing_token`,
        [runId],
      ),
    executions: (runId) =>
      sql.unsafe<Execution[]>(
        `SELECT label, step_id::text, fencing_token::text AS token, worker_id, ${ms('started_at')} AS started_at_ms
           FROM ${t('executions')} WHERE run_id = $1 ORDER BY id`,
        [runId],
      ),
    events: (runId) =>
      sql.unsafe<RunEvent[]>(
        `SELECT type, step_id::text, fencing_token::text AS token, worker_id,
                ${ms(`(data->>'dueAt')::timestamptz`)} AS due_at_ms, ${ms('at')} AS at_ms
           FROM ${t('run_events')} WHERE run_id = $1 ORDER BY at, rank, ord`,
        [runId],
      ),
    nowMs: async () => {
      const [row] = await sql.unsafe<{ now_ms: number }[]>(`SELECT ${ms(`"${schema}"."now"()`)} AS now_ms`);
      return Number(row?.now_ms);
    },
  };
}

/**
 * Wait until the sleep of a `steps-with-sleep` run (its second step) exists; resolves with the run's steps, the
 * timer at index 1. Polls (the timer's creation is a row, not an event), bounded by `pollUntil`'s default.
 */
export function sleepStarted(db: RunRecords, runId: string): Promise<RunStep[]> {
  return pollUntil(
    () => db.steps(runId),
    (steps) => steps[1]?.kind === 'timer',
    { what: 'the sleep to start' },
  );
}

/** What a run held at one instant, by the database clock. */
export interface RunSample {
  runId: string;
  atMs: number;
  status: string;
  /** The run's turn lease is live. */
  turnLeased: boolean;
  /** Steps `running` (leased or not). */
  runningSteps: number;
  /** Steps `running` whose lease is live. */
  leasedSteps: number;
  /** Attempts (turns or steps) not ended. */
  openAttempts: number;
  /** Timers scheduled and not fired. */
  pendingTimers: number;
}

export interface RunSampler {
  readonly samples: readonly RunSample[];
  /** Stop sampling; resolves after the sample in progress. @throws the error of a sample that failed. */
  stop(): Promise<readonly RunSample[]>;
}

/**
 * Sample `runIds` every `intervalMs` (one statement, one clock reading per sample) until `stop()`. For states
 * that no event announces (a lease nobody holds); the interval is a resolution, not a wait for an outcome.
 */
export function sampleRuns(
  sql: postgres.Sql,
  schema: string,
  runIds: readonly string[],
  intervalMs = 50,
): RunSampler {
  const t = (name: string): string => `"${schema}"."${name}"`;
  const samples: RunSample[] = [];
  let stopped = false;
  // A failed sample ends the loop and is thrown by stop(), not left as an unhandled rejection (a test that
  // fails before stop() closes the client under the loop).
  let failure: unknown;
  const loop = (async () => {
    while (!stopped) {
      const rows = await sql.unsafe<RunSample[]>(
        `WITH clock AS MATERIALIZED (SELECT "${schema}"."now"() AS t)
         SELECT r.id::text AS "runId", ${ms('c.t')} AS "atMs", r.status,
                coalesce(r.turn_lease_expires_at > c.t, false) AS "turnLeased",
                (SELECT count(*) FROM ${t('steps')} s WHERE s.run_id = r.id AND s.status = 'running')::int
                  AS "runningSteps",
                (SELECT count(*) FROM ${t('steps')} s
                  WHERE s.run_id = r.id AND s.status = 'running' AND s.lease_expires_at > c.t)::int AS "leasedSteps",
                (SELECT count(*) FROM ${t('attempts')} a WHERE a.run_id = r.id AND a.outcome IS NULL)::int
                  AS "openAttempts",
                (SELECT count(*) FROM ${t('steps')} s
                  WHERE s.run_id = r.id AND s.kind = 'timer' AND s.status = 'scheduled')::int AS "pendingTimers"
           FROM ${t('runs')} r, clock c WHERE r.id = ANY($1::uuid[])`,
        [runIds as string[]],
      );
      samples.push(...rows);
      if (!stopped) await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  })().catch((error: unknown) => {
    failure = error;
  });
  return {
    samples,
    async stop() {
      stopped = true;
      await loop;
      if (failure !== undefined)
        throw failure instanceof Error ? failure : new Error(JSON.stringify(failure));
      return samples;
    },
  };
}

/**
 * The longest time (by the database clock, ms) any sampled run spent unfinished with nothing holding it: no
 * live turn lease, no step with a live lease and no pending timer — work that is due but that nobody owns.
 * A stretch is measured from its first such sample to the next sample that shows an owner (or the last one).
 */
export function longestUnownedMs(samples: readonly RunSample[]): {
  runId: string;
  ms: number;
  fromMs: number;
} {
  const since = new Map<string, number>();
  let worst = { runId: '', ms: 0, fromMs: NaN };
  for (const s of samples) {
    const unowned =
      (s.status === 'pending' || s.status === 'running') &&
      !s.turnLeased &&
      s.leasedSteps === 0 &&
      s.pendingTimers === 0;
    const from = since.get(s.runId);
    if (from !== undefined && s.atMs - from > worst.ms)
      worst = { runId: s.runId, ms: s.atMs - from, fromMs: from };
    if (unowned && from === undefined) since.set(s.runId, s.atMs);
    if (!unowned) since.delete(s.runId);
  }
  return worst;
}

/**
 * Stop `sampler` and expect that no sampled run sat unfinished with nothing holding it for longer than
 * `boundMs` (F07: the lease plus the poll interval), and that there were samples to judge by.
 */
export async function expectNeverUnownedLonger(sampler: RunSampler, boundMs: number): Promise<void> {
  const samples = await sampler.stop();
  expect(samples.length).toBeGreaterThan(20);
  const worst = longestUnownedMs(samples);
  expect(worst.ms, `run ${worst.runId} was unowned from ${worst.fromMs} (DB ms)`).toBeLessThanOrEqual(
    boundMs,
  );
}
