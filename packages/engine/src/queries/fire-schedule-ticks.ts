import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { flowKeysInserted } from './flow-control.js';
import { notifyOnce } from './notify.js';
import { maxAttemptsOf, policiesInserted } from './policies.js';
import { msTimestamp, type SchemaNames } from './schema-names.js';
import { liveRunStatuses } from './status-sql.js';

/** One schedule's part of a firing statement: what its evaluator decided from the version it read. */
export interface ScheduleFiring {
  readonly id: string;
  /** The `version` the evaluator read: the statement applies only while the row is still at it. */
  readonly version: number;
  /** The ticks to fire, oldest first (ms, database clock), each with the id its run gets (fixed before the try). */
  readonly ticks: readonly { readonly tickMs: number; readonly runId: string }[];
  /** The schedule's next tick afterwards (ms); undefined keeps `next_tick_at` (a trigger, a backfill). */
  readonly nextTickMs?: number;
  /**
   * A manual firing (trigger, backfill): every tick starts a run whatever the overlap policy (`allow-all`), and
   * the buffered tick is kept.
   */
  readonly manual: boolean;
}

/**
 * The run parameters of standalone activity runs read from the activity definitions the firing process holds, by
 * activity name: they replace what the schedule stored (its target's parameters when it was created or last
 * updated), so a changed retry policy, lease, timeout or rate limit applies from the next tick on. A process
 * without the definition fires with the stored ones.
 */
export type ActivityRunParams = ReadonlyMap<
  string,
  {
    readonly retryPolicy: unknown;
    readonly leaseMs: number;
    readonly startToCloseTimeoutMs: number;
    readonly rateLimit: { readonly key: string; readonly limit: number; readonly periodMs: number } | null;
  }
>;

/** What a firing statement did. */
export interface FiredTicks {
  /** The schedules whose compare-and-set matched (the others were changed, locked or deleted meanwhile). */
  readonly applied: readonly string[];
  /** The runs it created, with their schedule and tick. */
  readonly runs: readonly { readonly scheduleId: string; readonly runId: string; readonly tickMs: number }[];
  /** Runs to cancel (overlap `cancel-previous`): the last run of a schedule that fired while it was live. */
  readonly cancel: readonly { readonly scheduleId: string; readonly runId: string }[];
}

/**
 * Fire the ticks of a batch of schedules, in one statement whose decisions are one jsonb parameter. Per
 * schedule, where the row is still at the version the evaluator read (compare-and-set), it is not locked by
 * another firing (`FOR NO KEY UPDATE SKIP LOCKED`: a second evaluator skips, never waits) and none of its ticks
 * is later than `<schema>.now()` at this statement (the database clock alone says what is due): the overlap
 * policy picks the ticks that start runs — `allow-all` every tick; `skip` the first, unless the schedule's last
 * run is still pending or running; `buffer-one` as `skip`, keeping the next tick buffered (the first tick given
 * is the buffered one, when there was one); `cancel-previous` the last tick, and its last run is returned to be
 * cancelled — and the row moves forward (version + 1, next tick, last run, buffered tick, skipped ticks). The
 * runs are inserted as `client.start` (a workflow: pending, first turn due now, `run:started`) or `client.enqueue`
 * (an activity: its step scheduled now, with the activity's retry policy, lease, timeout and rate limit — those of
 * `activities` when given, else those stored — and the rate key's `flow_keys` row) insert them, naming (schedule, tick), with `ON CONFLICT DO NOTHING`: the
 * unique index on (schedule_id, schedule_tick_at) makes a tick's run exactly one, even against a backfill or a
 * trigger; one NOTIFY for the whole statement.
 *
 * Why this shape: no leader and no lease. An evaluator that read a version and then stalled, lost its
 * connection or rolled back applies nothing or everything of its statement; one that is late finds the version
 * moved on and does nothing; clocks of the workers never enter (ticks are compared with the database clock).
 * Locks: the schedule rows it applies to (by id order), then the rows it inserts (new flow keys in key order).
 */
export async function fireScheduleTicks(
  db: Database,
  n: SchemaNames,
  firings: readonly ScheduleFiring[],
  activities: ActivityRunParams = new Map(),
): Promise<FiredTicks> {
  const decisions = firingDecisions(firings);
  const definitions = JSON.stringify(Object.fromEntries(activities));
  const now = sql`(SELECT t FROM clock)`;
  const rows = await db.rows<FiredRow>(sql`
    WITH clock AS MATERIALIZED (SELECT ${n.now} AS t),
    d AS MATERIALIZED (
      SELECT x.id, x.v, x.next, x.manual, x.ticks
        FROM jsonb_to_recordset(${decisions}::jsonb) AS x(id text, v bigint, next bigint, manual boolean, ticks jsonb)),
    -- The compare-and-set's read: rows still at the version read, locked; a row another firing holds is skipped.
    p AS MATERIALIZED (
      SELECT s.id, s.target_kind, s.target_name, s.input, s.last_run_id, d.next, d.manual, d.ticks,
             -- An activity's own parameters as this process defines it now, over those stored (see ActivityRunParams).
             CASE WHEN s.target_kind = 'activity'
                  THEN s.run_options || coalesce(${definitions}::jsonb -> s.target_name, '{}'::jsonb)
                  ELSE s.run_options END AS run_options,
             CASE WHEN d.manual THEN 'allow-all' ELSE s.overlap END AS overlap,
             EXISTS (SELECT 1 FROM ${n.runs} lr
                      WHERE lr.id = s.last_run_id AND lr.status IN ${liveRunStatuses}) AS prev_live
        FROM ${n.schedules} s JOIN d ON d.id = s.id AND s.version = d.v
       ORDER BY s.id
         FOR NO KEY UPDATE OF s SKIP LOCKED),
    tk AS MATERIALIZED (
      SELECT p.id, (t.e->>'r')::uuid AS run_id, ${msTimestamp(sql`(t.e->>'t')::bigint`)} AS tick_at, t.ord,
             count(*) OVER (PARTITION BY p.id) AS k
        FROM p CROSS JOIN LATERAL jsonb_array_elements(p.ticks) WITH ORDINALITY AS t(e, ord)),
    -- Only where no tick is later than the database clock now (a clock that stepped back fires nothing early).
    ok AS MATERIALIZED (
      SELECT p.* FROM p WHERE NOT EXISTS (SELECT 1 FROM tk WHERE tk.id = p.id AND tk.tick_at > ${now})),
    fire AS MATERIALIZED (
      SELECT tk.id, tk.run_id, tk.tick_at, ok.target_kind, ok.target_name, ok.input, ok.run_options
        FROM tk JOIN ok ON ok.id = tk.id
       WHERE CASE ok.overlap
               WHEN 'allow-all' THEN true
               WHEN 'cancel-previous' THEN tk.ord = tk.k
               ELSE NOT ok.prev_live AND tk.ord = 1
             END),
    agg AS MATERIALIZED (
      SELECT ok.id, ok.next, ok.manual, ok.overlap, ok.prev_live, ok.last_run_id,
             (SELECT count(*) FROM tk WHERE tk.id = ok.id) AS k,
             (SELECT count(*) FROM fire f WHERE f.id = ok.id) AS fired,
             (SELECT f.run_id FROM fire f WHERE f.id = ok.id ORDER BY f.tick_at DESC LIMIT 1) AS newest_run,
             (SELECT max(f.tick_at) FROM fire f WHERE f.id = ok.id) AS newest_tick,
             CASE WHEN ok.overlap = 'buffer-one' THEN
               (SELECT tk.tick_at FROM tk WHERE tk.id = ok.id AND tk.ord = CASE WHEN ok.prev_live THEN 1 ELSE 2 END)
             END AS buffered
        FROM ok),
    upd AS (
      UPDATE ${n.schedules} s
         SET version = s.version + 1,
             next_tick_at = coalesce(${msTimestamp(sql`a.next`)}, s.next_tick_at),
             buffered_tick_at = CASE WHEN a.manual THEN s.buffered_tick_at ELSE a.buffered END,
             last_run_id = CASE WHEN a.newest_tick >= coalesce(s.last_tick_at, '-infinity') THEN a.newest_run
                                ELSE s.last_run_id END,
             last_tick_at = greatest(s.last_tick_at, a.newest_tick),
             skipped_ticks = s.skipped_ticks + a.k - a.fired - (a.buffered IS NOT NULL)::int,
             updated_at = ${now}
        FROM agg a WHERE s.id = a.id
      RETURNING s.id),
    r AS (
      INSERT INTO ${n.runs} (id, kind, name, status, input, queue, priority, turn_next_run_at, created_at,
                             schedule_id, schedule_tick_at)
      SELECT f.run_id, f.target_kind, f.target_name, 'pending', f.input, f.run_options->>'queue',
             (f.run_options->>'priority')::int, CASE WHEN f.target_kind = 'workflow' THEN ${now} END, ${now},
             f.id, f.tick_at
        FROM fire f JOIN upd u ON u.id = f.id
       ORDER BY f.id, f.tick_at
      ON CONFLICT DO NOTHING
      RETURNING id, kind, name, queue, priority, schedule_id, schedule_tick_at),
    ${policiesInserted(
      n,
      'pol',
      sql`SELECT f.run_options->'retryPolicy' AS retry_policy, (f.run_options->>'leaseMs')::int AS lease_ms,
                 (f.run_options->>'startToCloseTimeoutMs')::int AS start_to_close_timeout_ms
            FROM r JOIN fire f ON f.run_id = r.id
           WHERE r.kind = 'activity'`,
    )}
    st AS (
      INSERT INTO ${n.steps} (run_id, seq, kind, name, fencing_scope, status, queue, priority, policy_id,
                              max_attempts, rate_key, rate_limit, rate_period_ms, next_run_at, created_at)
      SELECT r.id, 0, 'activity', r.name, 'run:' || r.id::text, 'scheduled', r.queue, r.priority,
             ${n.policyId}(f.run_options->'retryPolicy', (f.run_options->>'leaseMs')::int,
                           (f.run_options->>'startToCloseTimeoutMs')::int),
             ${maxAttemptsOf(sql`f.run_options->'retryPolicy'`)},
             -- The activity's rate limit, as client.enqueue gives its steps (schedules have no concurrency key).
             f.run_options->'rateLimit'->>'key', (f.run_options->'rateLimit'->>'limit')::int,
             (f.run_options->'rateLimit'->>'periodMs')::int, ${now}, ${now}
        FROM r JOIN fire f ON f.run_id = r.id
       WHERE r.kind = 'activity'
       ORDER BY r.id
      RETURNING rate_key, name),
    ${flowKeysInserted(n, sql`SELECT 'rate/' || name || '/' || rate_key FROM st`)}
    e AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT r.id, 'run:started',
             jsonb_build_object('workflow', r.name, 'queue', r.queue, 'schedule', r.schedule_id,
                                'tick', to_char(r.schedule_tick_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
             ${now}
        FROM r WHERE r.kind = 'workflow'
      RETURNING 1),
    ${notifyOnce(n, 'notified', sql`SELECT CASE WHEN kind = 'workflow' THEN 'turn:' ELSE 'step:' END || queue FROM r`)}
    SELECT (SELECT jsonb_agg(id) FROM upd) AS applied,
           (SELECT jsonb_agg(jsonb_build_object('s', schedule_id, 'r', id::text,
                                                't', round(extract(epoch FROM schedule_tick_at) * 1000)))
              FROM r) AS runs,
           (SELECT jsonb_agg(jsonb_build_object('s', a.id, 'r', a.last_run_id::text))
              FROM agg a JOIN upd u ON u.id = a.id
             WHERE a.overlap = 'cancel-previous' AND a.prev_live AND a.fired > 0) AS cancel,
           (SELECT count(*) FROM st) + (SELECT count(*) FROM e) + (SELECT count(*) FROM notified)
             + (SELECT count(*) FROM flow_keys_made) AS effects`);
  return firedTicksOf(rows[0]);
}

/** The firings as the statement's one jsonb parameter (short keys: it can carry many ticks). */
function firingDecisions(firings: readonly ScheduleFiring[]): string {
  return JSON.stringify(
    firings.map((f) => ({
      id: f.id,
      v: f.version,
      next: f.nextTickMs ?? null,
      manual: f.manual,
      ticks: f.ticks.map((t) => ({ t: t.tickMs, r: t.runId })),
    })),
  );
}

/** The one row a firing statement returns. */
interface FiredRow {
  readonly applied: string[] | null;
  readonly runs: { s: string; r: string; t: number }[] | null;
  readonly cancel: { s: string; r: string }[] | null;
}

function firedTicksOf(row: FiredRow | undefined): FiredTicks {
  return {
    applied: row?.applied ?? [],
    runs: (row?.runs ?? []).map((x) => ({ scheduleId: x.s, runId: x.r, tickMs: Number(x.t) })),
    cancel: (row?.cancel ?? []).map((x) => ({ scheduleId: x.s, runId: x.r })),
  };
}
