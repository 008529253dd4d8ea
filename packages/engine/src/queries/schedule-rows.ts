import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { msTimestamp, timestampMs, type SchemaNames } from './schema-names.js';
import { liveRunStatuses } from './status-sql.js';

/** A schedule row as the engine reads it: times in ms since the epoch (database clock). */
export interface ScheduleRow {
  id: string;
  cron: string | null;
  every_ms: number | null;
  timezone: string;
  target_kind: 'workflow' | 'activity';
  target_name: string;
  input: unknown;
  run_options: ScheduleRunOptions;
  overlap: 'skip' | 'buffer-one' | 'allow-all' | 'cancel-previous';
  catchup: { kind: 'none' } | { kind: 'latest' } | { kind: 'all'; windowMs: number };
  paused: boolean;
  next_tick_ms: number;
  version: number;
  last_run_id: string | null;
  last_tick_ms: number | null;
  buffered_tick_ms: number | null;
  skipped_ticks: number;
  created_ms: number;
  updated_ms: number;
}

/** The run parameters a schedule stores, resolved when it was created or updated. */
export interface ScheduleRunOptions {
  readonly queue: string;
  readonly priority: number;
  /**
   * Standalone activity runs only: the activity's parameters when the schedule was created or last changed. A
   * process that holds the activity's definition fires with the definition's instead (see ActivityRunParams).
   */
  readonly retryPolicy?: unknown;
  readonly leaseMs?: number;
  readonly startToCloseTimeoutMs?: number;
  /** The activity's rate limit; null or absent: none. */
  readonly rateLimit?: { readonly key: string; readonly limit: number; readonly periodMs: number } | null;
}

/** The columns of {@link ScheduleRow} from schedule alias `s`. */
function scheduleColumns(): SQL {
  return sql`s.id, s.cron, s.every_ms::float8 AS every_ms, s.timezone, s.target_kind, s.target_name, s.input,
    s.run_options, s.overlap, s.catchup, s.paused, ${timestampMs(sql`s.next_tick_at`)} AS next_tick_ms,
    s.version::float8 AS version, s.last_run_id::text, ${timestampMs(sql`s.last_tick_at`)} AS last_tick_ms,
    ${timestampMs(sql`s.buffered_tick_at`)} AS buffered_tick_ms, s.skipped_ticks::float8 AS skipped_ticks,
    ${timestampMs(sql`s.created_at`)} AS created_ms, ${timestampMs(sql`s.updated_at`)} AS updated_ms`;
}

/** The database clock, `<schema>.now()`, in ms since the epoch; a plain read. */
export async function readDatabaseNowMs(db: Database, n: SchemaNames): Promise<number> {
  const rows = await db.rows<{ ms: number }>(sql`SELECT ${timestampMs(n.now)} AS ms`);
  return Number(rows[0]?.ms);
}

/** What a new schedule row holds (see the schedules table). */
export interface NewScheduleRow {
  readonly id: string;
  readonly cron: string | null;
  readonly everyMs: number | null;
  readonly timezone: string;
  readonly targetKind: 'workflow' | 'activity';
  readonly targetName: string;
  readonly inputJson: string;
  readonly runOptions: ScheduleRunOptions;
  readonly overlap: ScheduleRow['overlap'];
  readonly catchup: ScheduleRow['catchup'];
  readonly paused: boolean;
  /** Whether the caller gave `paused`: only then must an existing schedule's paused state match. */
  readonly pausedGiven: boolean;
  readonly nextTickMs: number;
}

/**
 * Insert a schedule, version 1, created and updated now by the database clock. Predicate: `ON CONFLICT (id) DO
 * NOTHING`, so an existing id is left as it is; the same statement tells whether the existing row holds exactly
 * what was asked (spec, target, input, queue, priority, policies, and paused when given): a create retried after a
 * lost reply, or run again at every start of an application, is then no conflict. The target activity's own
 * parameters (retry policy, lease, timeout, rate limit) are not the schedule's options and are not compared: a
 * row that differs only in those gets the ones given (a new version), since they come from the definition the
 * caller holds now. Locks the new row, or the existing one when it refreshes it.
 * @returns `inserted`, `same` (the id exists with these options) or `different` (it exists with others).
 */
export async function insertSchedule(
  db: Database,
  n: SchemaNames,
  p: NewScheduleRow,
): Promise<'inserted' | 'same' | 'different'> {
  const runOptions = JSON.stringify(p.runOptions);
  const catchup = JSON.stringify(p.catchup);
  const rows = await db.rows<{ inserted: boolean; same: boolean }>(sql`
    WITH ins AS (
      INSERT INTO ${n.schedules} (id, cron, every_ms, timezone, target_kind, target_name, input, run_options,
                                  overlap, catchup, paused, next_tick_at, created_at, updated_at)
      VALUES (${p.id}, ${p.cron}, ${p.everyMs}, ${p.timezone}, ${p.targetKind}, ${p.targetName},
              ${p.inputJson}::jsonb, ${runOptions}::jsonb, ${p.overlap}, ${catchup}::jsonb, ${p.paused},
              ${msTimestamp(sql`${p.nextTickMs}`)}, ${n.now}, ${n.now})
      ON CONFLICT (id) DO NOTHING
      RETURNING id),
    same AS (
      SELECT s.id, s.run_options = ${runOptions}::jsonb AS same_params FROM ${n.schedules} s
       WHERE s.id = ${p.id} AND s.cron IS NOT DISTINCT FROM ${p.cron}::text
         AND s.every_ms IS NOT DISTINCT FROM ${p.everyMs}::bigint AND s.timezone = ${p.timezone}
         AND s.target_kind = ${p.targetKind} AND s.target_name = ${p.targetName}
         AND s.input IS NOT DISTINCT FROM ${p.inputJson}::jsonb
         AND s.run_options->>'queue' = ${p.runOptions.queue}
         AND (s.run_options->>'priority')::int = ${p.runOptions.priority}::int
         AND s.overlap = ${p.overlap} AND s.catchup = ${catchup}::jsonb
         -- Paused or not is an operator's choice: it counts only when the caller said which.
         AND (NOT ${p.pausedGiven}::boolean OR s.paused = ${p.paused})),
    refreshed AS (
      UPDATE ${n.schedules} s SET run_options = ${runOptions}::jsonb, version = s.version + 1, updated_at = ${n.now}
        FROM same WHERE s.id = same.id AND NOT same.same_params AND NOT EXISTS (SELECT 1 FROM ins)
      RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM ins) AS inserted, EXISTS (SELECT 1 FROM same) AS same,
           (SELECT count(*) FROM refreshed)::int AS refreshed`);
  const row = rows[0];
  return row?.inserted ? 'inserted' : row?.same ? 'same' : 'different';
}

/** One schedule by id, and the database time of the read (ms); plain read. */
export async function readSchedule(
  db: Database,
  n: SchemaNames,
  id: string,
): Promise<{ row: ScheduleRow | undefined; nowMs: number }> {
  const rows = await db.rows<ScheduleRow & { now_ms: number; found: boolean }>(sql`
    SELECT ${timestampMs(n.now)} AS now_ms, s.id IS NOT NULL AS found, x.*
      FROM (SELECT 1) one
      LEFT JOIN ${n.schedules} s ON s.id = ${id}
      LEFT JOIN LATERAL (SELECT ${scheduleColumns()}) x ON s.id IS NOT NULL`);
  const first = rows[0];
  if (!first) throw new Error('readSchedule returned no row');
  const { now_ms, found, ...row } = first;
  return { row: found ? row : undefined, nowMs: Number(now_ms) };
}

/** Schedules by id, at most `limit`; plain read. */
export async function listSchedules(
  db: Database,
  n: SchemaNames,
  p: { limit: number },
): Promise<ScheduleRow[]> {
  return db.rows<ScheduleRow>(sql`
    SELECT ${scheduleColumns()} FROM ${n.schedules} s ORDER BY s.id LIMIT ${p.limit}`);
}

/** The columns an update of a schedule may set; absent ones are kept. */
export interface ScheduleChanges {
  readonly cron?: string | null;
  readonly everyMs?: number | null;
  readonly timezone?: string;
  readonly targetKind?: 'workflow' | 'activity';
  readonly targetName?: string;
  readonly inputJson?: string;
  readonly runOptions?: ScheduleRunOptions;
  readonly overlap?: ScheduleRow['overlap'];
  readonly catchup?: ScheduleRow['catchup'];
  readonly paused?: boolean;
  readonly nextTickMs?: number;
  /** Drop a buffered tick (pause, a new spec). */
  readonly clearBuffered?: boolean;
}

/**
 * Change schedule `id` if it is still at `version` (compare-and-set: the caller computed the changes, e.g. the
 * next tick of a new cron expression, from that version), bumping the version and `updated_at`. An evaluator that
 * read the old version then loses its own compare-and-set and fires nothing on the old spec. Locks the row.
 * @returns the row as written, or undefined when it is gone or at another version (read it again and retry).
 */
export async function updateSchedule(
  db: Database,
  n: SchemaNames,
  p: { id: string; version: number; changes: ScheduleChanges },
): Promise<ScheduleRow | undefined> {
  const c = p.changes;
  const set: SQL[] = [sql`version = s.version + 1`, sql`updated_at = ${n.now}`];
  if (c.cron !== undefined) set.push(sql`cron = ${c.cron}`);
  if (c.everyMs !== undefined) set.push(sql`every_ms = ${c.everyMs}`);
  if (c.timezone !== undefined) set.push(sql`timezone = ${c.timezone}`);
  if (c.targetKind !== undefined) set.push(sql`target_kind = ${c.targetKind}`);
  if (c.targetName !== undefined) set.push(sql`target_name = ${c.targetName}`);
  if (c.inputJson !== undefined) set.push(sql`input = ${c.inputJson}::jsonb`);
  if (c.runOptions !== undefined) set.push(sql`run_options = ${JSON.stringify(c.runOptions)}::jsonb`);
  if (c.overlap !== undefined) set.push(sql`overlap = ${c.overlap}`);
  if (c.catchup !== undefined) set.push(sql`catchup = ${JSON.stringify(c.catchup)}::jsonb`);
  if (c.paused !== undefined) set.push(sql`paused = ${c.paused}`);
  if (c.nextTickMs !== undefined) set.push(sql`next_tick_at = ${msTimestamp(sql`${c.nextTickMs}`)}`);
  if (c.clearBuffered) set.push(sql`buffered_tick_at = NULL`);
  const rows = await db.rows<ScheduleRow>(sql`
    UPDATE ${n.schedules} s SET ${sql.join(set, sql`, `)}
     WHERE s.id = ${p.id} AND s.version = ${p.version}
    RETURNING ${scheduleColumns()}`);
  return rows[0];
}

/**
 * Delete schedule `id` and let go of its runs: they are kept, and their `run:started` events still name the
 * schedule and tick, but their `schedule_id` and `schedule_tick_at` are cleared, so a schedule created again under
 * this id starts afresh (its ticks are not taken by the old runs, and `schedules show` lists only its own). Locks
 * the schedule row, then the runs it made.
 * @returns whether it existed.
 */
export async function deleteSchedule(db: Database, n: SchemaNames, id: string): Promise<boolean> {
  const rows = await db.rows<{ id: string; runs: number }>(sql`
    WITH d AS (DELETE FROM ${n.schedules} WHERE id = ${id} RETURNING id),
    released AS (
      UPDATE ${n.runs} SET schedule_id = NULL, schedule_tick_at = NULL
       WHERE schedule_id = ${id} AND EXISTS (SELECT 1 FROM d)
      RETURNING 1)
    SELECT id, (SELECT count(*) FROM released)::int AS runs FROM d`);
  return rows.length === 1;
}

/** A schedule an evaluation may fire, as {@link readDueSchedules} read it. */
export interface DueScheduleRow {
  id: string;
  cron: string | null;
  every_ms: number | null;
  timezone: string;
  overlap: ScheduleRow['overlap'];
  catchup: ScheduleRow['catchup'];
  version: number;
  next_tick_ms: number;
  buffered_tick_ms: number | null;
  /** Whether `next_tick_at` is due (false: read only to release its buffered tick). */
  due: boolean;
}

/**
 * The schedules an evaluation should look at, at most `limit`, in due order, and the database time of the read:
 * those not paused whose `next_tick_at <= <schema>.now()` (off `schedules_due_idx`), and those whose buffered
 * tick (overlap `buffer-one`) may start because the run it waits for has ended. Also how long, by the database
 * clock, until the earliest next tick of a schedule not paused (negative: overdue; null: no schedule), so the
 * evaluator sleeps until then. Plain read, no locks: the firing statement decides, by compare-and-set on
 * `version`.
 */
export async function readDueSchedules(
  db: Database,
  n: SchemaNames,
  p: { limit: number },
): Promise<{ rows: DueScheduleRow[]; nowMs: number; nextDueInMs: number | null }> {
  const cols = sql`s.id, s.cron, s.every_ms::float8 AS every_ms, s.timezone, s.overlap, s.catchup,
    s.version::float8 AS version, ${timestampMs(sql`s.next_tick_at`)} AS next_tick_ms,
    ${timestampMs(sql`s.buffered_tick_at`)} AS buffered_tick_ms, s.next_tick_at <= c.t AS due`;
  const rows = await db.rows<DueScheduleRow & { now_ms: number; next_due_in_ms: number | null }>(sql`
    WITH c AS MATERIALIZED (SELECT ${n.now} AS t)
    SELECT ${timestampMs(sql`c.t`)} AS now_ms,
           (SELECT extract(epoch FROM min(m.next_tick_at) - c.t) * 1000 FROM ${n.schedules} m
             WHERE NOT m.paused)::float8 AS next_due_in_ms,
           d.*
      FROM c LEFT JOIN LATERAL (
        SELECT * FROM (
          (SELECT ${cols} FROM ${n.schedules} s
            WHERE NOT s.paused AND s.next_tick_at <= c.t
            ORDER BY s.next_tick_at LIMIT ${p.limit})
          UNION
          (SELECT ${cols} FROM ${n.schedules} s
            WHERE s.buffered_tick_at IS NOT NULL AND NOT s.paused
              AND NOT EXISTS (SELECT 1 FROM ${n.runs} lr
                               WHERE lr.id = s.last_run_id AND lr.status IN ${liveRunStatuses})
            ORDER BY s.buffered_tick_at LIMIT ${p.limit})) u
        ORDER BY u.next_tick_ms LIMIT ${p.limit}) d ON true`);
  const first = rows[0];
  const nowMs = Number(first?.now_ms);
  const nextDueInMs = first?.next_due_in_ms ?? null;
  return {
    rows: rows.filter((r) => r.id !== null).map(({ now_ms: _n, next_due_in_ms: _d, ...r }) => r),
    nowMs,
    nextDueInMs: nextDueInMs === null ? null : Number(nextDueInMs),
  };
}
