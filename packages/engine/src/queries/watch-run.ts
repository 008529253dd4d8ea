import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { EventRow } from './read-run.js';
import type { SchemaNames } from './schema-names.js';

/** An event of a run's history as `handle.watch()` yields it: the `describe()` event plus its place. */
export interface WatchedEventRow extends EventRow {
  /** The name of the step the event is about (an activity, `sleep`, a signal wait, …), or null for the run's own. */
  step_name: string | null;
  /** Where the event sits in the run's history: (at in µs since the epoch, rank, ord), as the cursor holds it. */
  at_us: string;
  rank: number;
  ord: string;
}

/** A place in a run's history: after this event. */
export interface WatchPosition {
  readonly atUs: string;
  readonly rank: number;
  readonly ord: string;
  readonly id: string;
}

/**
 * How far back the horizon may lag the database clock (ms) when a transaction that could still write older events
 * is open or cannot be seen: past it, such a transaction's events are yielded when they commit, out of order.
 */
export const WATCH_HORIZON_MAX_LAG_MS = 10_000;

/**
 * The horizon before which every event of every run is committed (or never will be), in µs of database time.
 * Every event's time is `<schema>.now()` = clock_timestamp() + the time-travel offset, read inside its own
 * transaction, so it is never earlier than that transaction's start plus the offset: the horizon is the earliest
 * start of the other transactions open now (pg_stat_activity), or now when none is. Read in its own statement,
 * before the statement that reads the events: a transaction open now that commits before that read is then seen
 * by it, and one that starts later writes after the horizon. A transaction this role cannot see (another role's,
 * without pg_read_all_stats), or one open longer than {@link WATCH_HORIZON_MAX_LAG_MS}, holds the horizon back
 * that long at most.
 */
export async function readWatchHorizon(db: Database, n: SchemaNames): Promise<string> {
  const rows = await db.rows<{ horizon_us: string }>(sql`
    WITH clock AS MATERIALIZED (
      SELECT ${n.now} AS now_at,
             coalesce((SELECT offset_ms FROM ${n.clockOffset}), 0) * interval '1 millisecond' AS offset_by),
    open_tx AS (
      SELECT min(a.xact_start) AS oldest, bool_or(a.state IS NULL) AS unseen
        FROM pg_stat_activity a
       WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
         AND (a.xact_start IS NOT NULL OR a.state IS NULL))
    SELECT (extract(epoch FROM greatest(
              c.now_at - ${WATCH_HORIZON_MAX_LAG_MS} * interval '1 millisecond',
              CASE WHEN o.unseen THEN c.now_at - ${WATCH_HORIZON_MAX_LAG_MS} * interval '1 millisecond'
                   ELSE least(c.now_at, o.oldest + c.offset_by) END)) * 1000000)::bigint::text AS horizon_us
      FROM clock c, open_tx o`);
  return rows[0]!.horizon_us;
}

/**
 * The events of run `runId` after `after` (all when undefined) and before `horizonUs`, in history order (at, rank,
 * ord, id — the order of `describe().events`), at most `limit`; whether the run has events at or past the horizon
 * (held back until the transactions open before them end); and the run's status and end time as now committed.
 */
export async function readRunEventsAfter(
  db: Database,
  n: SchemaNames,
  runId: string,
  after: WatchPosition | undefined,
  horizonUs: string,
  limit: number,
): Promise<{
  events: WatchedEventRow[];
  heldBack: boolean;
  status: string | undefined;
  finishedUs: string | null;
}> {
  const afterClause = after
    ? sql`AND (e.at, e.rank, e.ord, e.id) > ('epoch'::timestamptz + ${after.atUs}::bigint * interval '1 microsecond',
                                             ${after.rank}::int, ${after.ord}::bigint, ${after.id}::text)`
    : sql``;
  const rows = await db.rows<{
    events: WatchedEventRow[] | null;
    held_back: boolean;
    status: string | null;
    finished_us: string | null;
  }>(sql`
    SELECT (SELECT jsonb_agg(x ORDER BY x.at_us::bigint, x.rank, x.ord::bigint, x.id) FROM (
              SELECT e.id, e.step_id::text, s.name AS step_name, e.type, e.attempt, e.epoch,
                     e.fencing_token::text AS token, e.worker_id, e.data,
                     to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at,
                     (extract(epoch FROM e.at) * 1000000)::bigint::text AS at_us, e.rank, e.ord::text AS ord
                FROM ${n.runEvents} e LEFT JOIN ${n.steps} s ON s.id = e.step_id
               WHERE e.run_id = ${runId}::uuid
                 AND e.at < 'epoch'::timestamptz + ${horizonUs}::bigint * interval '1 microsecond' ${afterClause}
               ORDER BY e.at, e.rank, e.ord, e.id
               LIMIT ${limit}) x) AS events,
           EXISTS (SELECT 1 FROM ${n.runEvents} e
                    WHERE e.run_id = ${runId}::uuid
                      AND e.at >= 'epoch'::timestamptz + ${horizonUs}::bigint * interval '1 microsecond') AS held_back,
           r.status,
           (extract(epoch FROM r.finished_at) * 1000000)::bigint::text AS finished_us
      FROM (SELECT 1) one LEFT JOIN ${n.runs} r ON r.id = ${runId}::uuid`);
  const row = rows[0];
  return {
    events: row?.events ?? [],
    heldBack: row?.held_back ?? false,
    status: row?.status ?? undefined,
    finishedUs: row?.finished_us ?? null,
  };
}
