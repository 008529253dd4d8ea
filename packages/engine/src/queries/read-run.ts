import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { jobRunColumns, stepOutputSql } from './job-run.js';
import type { SchemaNames } from './schema-names.js';
import type {
  AttemptKind,
  AttemptOutcome,
  RunKind,
  RunStatus,
  StepKind,
  StepStatus,
} from '../turn/state-machine.js';

export interface RunRow {
  id: string;
  kind: RunKind;
  name: string;
  status: RunStatus;
  input: unknown;
  output: unknown;
  error: unknown;
  /** A workflow run's last `ctx.setProgress` value, or null. */
  progress: unknown;
  /** The run that started this one with `ctx.runChild`, or null. */
  parent_run_id: string | null;
  /** The schedule whose tick (or trigger, or backfill) created this run, or null. */
  schedule_id: string | null;
  /** The tick of `schedule_id` this run is for (ISO 8601, database clock), or null. */
  schedule_tick_at: string | null;
  /** A workflow run's per-key concurrency (`start`'s `concurrency`), or null (a job's is on its step). */
  concurrency: { key: string; limit: number } | null;
  idempotency_key: string | null;
  queue: string;
  priority: number;
  cancel_reason: string | null;
  created_at: string;
  /**
   * When a run whose start was delayed (`startAt`, `delay`, `delayMs`) becomes due, while it is `pending` and that
   * time is still ahead by the database clock; null otherwise.
   */
  start_at: string | null;
  started_at: string | null;
  finished_at: string | null;
}

/** The columns of a {@link RunRow} from run alias `r` (a job's status and start read off its step: job-run.ts). */
export function runColumns(n: SchemaNames): SQL {
  const job = jobRunColumns(n, sql`r`);
  return sql`r.id::text, r.kind, r.name, ${job.status} AS status, r.input, r.output, r.error, r.progress,
  r.parent_run_id::text, r.schedule_id,
  CASE WHEN r.concurrency_key IS NOT NULL
       THEN jsonb_build_object('key', r.concurrency_key, 'limit', r.concurrency_limit) END AS concurrency,
  to_char(r.schedule_tick_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS schedule_tick_at, r.idempotency_key,
  r.queue, r.priority, r.cancel_reason,
  to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at,
  to_char(${job.startAt} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS start_at,
  to_char(${job.startedAt} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS started_at,
  to_char(r.finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS finished_at`;
}

/** One run by id; plain read. */
export async function readRun(db: Database, n: SchemaNames, runId: string): Promise<RunRow | undefined> {
  if (!/^[0-9a-f-]{36}$/i.test(runId)) return undefined;
  const rows = await db.rows<RunRow>(
    sql`SELECT ${runColumns(n)} FROM ${n.runs} r WHERE r.id = ${runId}::uuid`,
  );
  return rows[0];
}

export interface ListRunsFilter {
  readonly status?: RunRow['status'] | undefined;
  readonly name?: string | undefined;
  readonly limit?: number | undefined;
}

/** Newest runs first, filtered; plain read. */
export async function listRuns(db: Database, n: SchemaNames, f: ListRunsFilter = {}): Promise<RunRow[]> {
  return db.rows<RunRow>(sql`
    SELECT ${runColumns(n)} FROM ${n.runs} r
     WHERE (${f.status ?? null}::text IS NULL OR ${jobRunColumns(n, sql`r`).status} = ${f.status ?? null})
       AND (${f.name ?? null}::text IS NULL OR r.name = ${f.name ?? null})
     ORDER BY r.created_at DESC, r.id
     LIMIT ${f.limit ?? 50}`);
}

/**
 * The runs schedule `scheduleId` started, newest tick first, at most `limit`; plain read off the unique
 * (schedule_id, schedule_tick_at) index.
 */
export async function listScheduleRuns(
  db: Database,
  n: SchemaNames,
  p: { scheduleId: string; limit: number },
): Promise<RunRow[]> {
  return db.rows<RunRow>(sql`
    SELECT ${runColumns(n)} FROM ${n.runs} r
     WHERE r.schedule_id = ${p.scheduleId}
     ORDER BY r.schedule_tick_at DESC
     LIMIT ${p.limit}`);
}

export interface StepRow {
  id: string;
  seq: number;
  kind: StepKind;
  name: string;
  status: StepStatus;
  attempt: number;
  epoch: number;
  token: string | null;
  output: unknown;
  error: unknown;
  next_run_at: string | null;
  lease_expires_at: string | null;
  /** The last `ctx.heartbeat(details)` of the step's attempts, or null. */
  heartbeat_details: unknown;
  /** Set (ISO 8601) when `client.retry` withdrew the step from the replayed history; the row is kept. */
  retired_at: string | null;
  /** The step's per-key concurrency (`concurrency` of `enqueue` / `ctx.run`), or null. */
  concurrency: { key: string; limit: number } | null;
  /** The step's per-key rate limit, or null. */
  rate_limit: { key: string; limit: number; period_ms: number } | null;
}

export interface AttemptRow {
  step_id: string | null;
  kind: AttemptKind;
  attempt: number;
  epoch: number;
  token: string;
  worker_id: string;
  claimed_at: string;
  ended_at: string | null;
  /** How the attempt ended, or null while it is open. */
  outcome: AttemptOutcome | null;
  duration_ms: number | null;
}

export interface EventRow {
  id: string;
  step_id: string | null;
  type: string;
  attempt: number | null;
  epoch: number | null;
  token: string | null;
  worker_id: string | null;
  data: unknown;
  at: string;
}

const ts = (col: string) => sql.raw(`to_char(${col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`);

/** A run's steps, attempts and events, in order; plain reads in one REPEATABLE-READ-free pass (may interleave). */
export async function readRunHistory(
  db: Database,
  n: SchemaNames,
  runId: string,
): Promise<{ steps: StepRow[]; attempts: AttemptRow[]; events: EventRow[] }> {
  const [steps, attempts, events] = await Promise.all([
    db.rows<StepRow>(sql`
      SELECT s.id::text, s.seq, s.kind, s.name, s.status, s.attempt, s.epoch, s.fencing_token::text AS token,
             ${stepOutputSql(n, sql`s`)} AS output, s.error, ${ts('s.next_run_at')} AS next_run_at,
             ${ts('s.lease_expires_at')} AS lease_expires_at, s.heartbeat_details, ${ts('s.retired_at')} AS retired_at,
             CASE WHEN s.concurrency_key IS NOT NULL
                  THEN jsonb_build_object('key', s.concurrency_key, 'limit', s.concurrency_limit) END AS concurrency,
             CASE WHEN s.rate_key IS NOT NULL
                  THEN jsonb_build_object('key', s.rate_key, 'limit', s.rate_limit, 'period_ms', s.rate_period_ms)
             END AS rate_limit
        FROM ${n.steps} s WHERE s.run_id = ${runId}::uuid ORDER BY s.seq, s.created_at`),
    db.rows<AttemptRow>(sql`
      SELECT step_id::text, kind, attempt, epoch, fencing_token::text AS token, worker_id,
             ${ts('claimed_at')} AS claimed_at, ${ts('ended_at')} AS ended_at, outcome,
             (extract(epoch FROM (ended_at - claimed_at)) * 1000)::float8 AS duration_ms
        FROM ${n.attempts} WHERE run_id = ${runId}::uuid ORDER BY fencing_token`),
    db.rows<EventRow>(sql`
      SELECT id, step_id::text, type, attempt, epoch, fencing_token::text AS token, worker_id, data, ${ts('at')} AS at
        FROM ${n.runEvents} e WHERE e.run_id = ${runId}::uuid ORDER BY e.at, e.rank, e.ord`),
  ]);
  return { steps, attempts, events };
}

/** A child run, as `describe().children` lists it. */
export interface ChildRunRow {
  id: string;
  name: string;
  status: RunStatus;
  /** The parent's step that started it (its position in the parent's history). */
  seq: number | null;
  created_at: string;
  finished_at: string | null;
}

/** The runs run `runId` started with `ctx.runChild`, oldest first. */
export async function readChildRuns(db: Database, n: SchemaNames, runId: string): Promise<ChildRunRow[]> {
  return db.rows<ChildRunRow>(sql`
    SELECT c.id::text, c.name, c.status, s.seq, ${ts('c.created_at')} AS created_at,
           ${ts('c.finished_at')} AS finished_at
      FROM ${n.runs} c LEFT JOIN ${n.steps} s ON s.id = c.parent_step_id
     WHERE c.parent_run_id = ${runId}::uuid
     ORDER BY c.created_at, s.seq, c.id`);
}
