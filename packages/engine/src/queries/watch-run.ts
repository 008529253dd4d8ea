import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { EventRow } from './read-run.js';
import type { SchemaNames } from './schema-names.js';
import type { RunStatus } from '../turn/state-machine.js';

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
 * How long after its time an event is yielded at the latest when nothing holds it back (ms): the horizon of a read
 * is its database time minus this. Events are stamped with `<schema>.now()` inside the statement that writes them,
 * before it commits, so an event may become visible after a later-stamped one; holding each back this long yields
 * them in history order as long as their statements commit within it (the engine's are single statements).
 * Rejected: a horizon at the oldest open transaction (pg_stat_activity), which any long transaction of the
 * database, or one the engine's role cannot see, held back for seconds (issue 26).
 */
export const WATCH_SETTLE_MS = 250;

/**
 * How far back from the furthest event it yielded a watch still looks for events that became visible late (ms):
 * one whose statement committed more than {@link WATCH_SETTLE_MS} after its time is yielded then, out of order,
 * rather than never.
 */
export const WATCH_LATE_MS = 10_000;

/** What one read of a watch asks for. */
export interface WatchReadParams {
  /** The furthest event yielded so far (none: from the run's start). */
  readonly after: WatchPosition | undefined;
  /** Where the watch started (its `after` option): nothing at or before it is read, late or not. */
  readonly from: WatchPosition | undefined;
  /** The events yielded so far at or after `after.atUs - WATCH_LATE_MS` µs, by id: not yielded again. */
  readonly seenIds: readonly string[];
  readonly limit: number;
}

/**
 * One read of a watch of run `runId`: its events stamped before the horizon (database time minus
 * {@link WATCH_SETTLE_MS}) that come after `after` in history order (at, rank, ord, id — the order of
 * `describe().events`), plus those stamped within {@link WATCH_LATE_MS} before `after` that are not in `seenIds`
 * (visible late); at most `limit`, in history order. Also whether the run has events past the horizon
 * (`heldBack`), the run's status and end time as now committed, the horizon, and whether a transaction still in
 * progress holds the run row (`writing`, see readRunForWaiter): a turn commit that decided on its NOTIFY before
 * this watch registered. Plain read: no lock, no write; reads no other session's state.
 */
export async function readRunEventsAfter(
  db: Database,
  n: SchemaNames,
  runId: string,
  p: WatchReadParams,
): Promise<{
  events: WatchedEventRow[];
  heldBack: boolean;
  status: RunStatus | undefined;
  finishedUs: string | null;
  horizonUs: string;
  writing: boolean;
}> {
  const after = p.after;
  const position = sql`(e.at, e.rank, e.ord, e.id)`;
  const from = p.from;
  const fromClause = from
    ? sql`AND ${position} > ('epoch'::timestamptz + ${from.atUs}::bigint * interval '1 microsecond',
                              ${from.rank}::int, ${from.ord}::bigint, ${from.id}::text)`
    : sql``;
  const afterClause = after
    ? sql`AND (${position} > ('epoch'::timestamptz + ${after.atUs}::bigint * interval '1 microsecond',
                               ${after.rank}::int, ${after.ord}::bigint, ${after.id}::text)
               OR (e.at >= 'epoch'::timestamptz + ${after.atUs}::bigint * interval '1 microsecond'
                            - ${WATCH_LATE_MS} * interval '1 millisecond'
                   AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(${JSON.stringify(p.seenIds)}::jsonb) y(id)
                                    WHERE y.id = e.id) ${fromClause}))`
    : sql``;
  const rows = await db.rows<{
    events: WatchedEventRow[] | null;
    held_back: boolean;
    status: RunStatus | null;
    finished_us: string | null;
    horizon_us: string;
    writing: boolean | null;
  }>(sql`
    WITH clock AS MATERIALIZED (SELECT ${n.now} - ${WATCH_SETTLE_MS} * interval '1 millisecond' AS horizon)
    SELECT (SELECT jsonb_agg(x ORDER BY x.at_us::bigint, x.rank, x.ord::bigint, x.id) FROM (
              SELECT e.id, e.step_id::text, s.name AS step_name, e.type, e.attempt, e.epoch,
                     e.fencing_token::text AS token, e.worker_id, e.data,
                     to_char(e.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at,
                     (extract(epoch FROM e.at) * 1000000)::bigint::text AS at_us, e.rank, e.ord::text AS ord
                FROM ${n.runEvents} e LEFT JOIN ${n.steps} s ON s.id = e.step_id
               WHERE e.run_id = ${runId}::uuid AND e.at < (SELECT horizon FROM clock) ${afterClause}
               ORDER BY e.at, e.rank, e.ord, e.id
               LIMIT ${p.limit}) x) AS events,
           EXISTS (SELECT 1 FROM ${n.runEvents} e
                    WHERE e.run_id = ${runId}::uuid AND e.at >= (SELECT horizon FROM clock)) AS held_back,
           r.status,
           (extract(epoch FROM r.finished_at) * 1000000)::bigint::text AS finished_us,
           (extract(epoch FROM (SELECT horizon FROM clock)) * 1000000)::bigint::text AS horizon_us,
           r.xmax::text <> '0' AND EXISTS (
             SELECT 1 FROM pg_snapshot_xip(pg_current_snapshot()) x
              WHERE x::text::bigint % 4294967296 = r.xmax::text::bigint) AS writing
      FROM (SELECT 1) one LEFT JOIN ${n.runs} r ON r.id = ${runId}::uuid`);
  const row = rows[0]!;
  return {
    events: row.events ?? [],
    heldBack: row.held_back,
    status: row.status ?? undefined,
    finishedUs: row.finished_us ?? null,
    horizonUs: row.horizon_us,
    writing: row.writing ?? false,
  };
}
