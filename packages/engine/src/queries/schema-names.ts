import { sql, type SQL } from 'drizzle-orm';
import { quoteIdent } from '../db/database.js';

/**
 * SQL fragments naming the objects of one engine schema. All engine statements are raw SQL (they lean on
 * CTEs, `FOR UPDATE SKIP LOCKED` and sequences), so they name tables through these instead of the drizzle
 * table objects.
 */
export interface SchemaNames {
  readonly schema: string;
  readonly runs: SQL;
  readonly steps: SQL;
  /** The option sets steps run under, keyed by content (migration 0027). */
  readonly policies: SQL;
  /** The claimable set of activity steps (migration 0024). */
  readonly ready: SQL;
  /** The claimable workflow turns, kept by triggers on `runs` (migration 0025). */
  readonly turnQueue: SQL;
  /**
   * Attempts recorded as rows (the table `attempt_records`, named `attempts` before migration 0029): every turn's,
   * and an activity's that ended other than by its own completion. {@link attempts} shows every attempt; write here.
   */
  readonly attemptRecords: SQL;
  /**
   * Every attempt of every run (a view, migration 0029): `attempt_records` plus each activity step's current grant
   * that no row records, read off the step; `id` is null for those. Read-only; order a run's attempts by
   * `fencing_token`.
   */
  readonly attempts: SQL;
  readonly events: SQL;
  /** The view of a run's history: stored events plus those read off runs, steps and attempts (migrations 0008, 0029). */
  readonly runEvents: SQL;
  readonly fences: SQL;
  /** Signals sent to workflow runs (migration 0012). */
  readonly signals: SQL;
  /** Flow-control keys: per-key concurrency and rate limits (migration 0016). */
  readonly flowKeys: SQL;
  readonly runWatchers: SQL;
  /** `<schema>.run_watched` (call it as `${n.runWatched}(run_id, turns)`). */
  readonly runWatched: SQL;
  /** Durable schedules (migration 0017). */
  readonly schedules: SQL;
  readonly clockOffset: SQL;
  /** `nextval(...)` of the global fencing-token sequence. */
  readonly nextToken: SQL;
  /** The one time function: `<schema>.now()`. */
  readonly now: SQL;
  /** `<schema>.ready_due` (call it as `${n.readyDue}(s)` with a steps row): when its ready row is due, or NULL. */
  readonly readyDue: SQL;
  /** `<schema>.ready_expiring` (call it as `${n.readyExpiring}(s)`): a running step to end at lease expiry. */
  readonly readyExpiring: SQL;
  /** `<schema>.ready_rotate` (call it as `${n.readyRotate}(min_interval_ms, min_bytes)`): one turn of the ring. */
  readonly readyRotate: SQL;
  /** `<schema>.turn_queue_due` (call it as `${n.turnQueueDue}(kind, status, turn_next_run_at, turn_lease_expires_at)`). */
  readonly turnQueueDue: SQL;
  /**
   * `<schema>.policy_id` (call it as `${n.policyId}(retry_policy, lease_ms, start_to_close_timeout_ms)`): the
   * content key of an option set, a uuid.
   */
  readonly policyId: SQL;
  /** `<schema>.retry_delay_ms` (call it as `${n.retryDelayMs}(policy, attempt)`). */
  readonly retryDelayMs: SQL;
  /** LISTEN/NOTIFY channel of this schema. */
  readonly channel: string;
}

/** Valid engine schema names: lowercase identifiers, so the NOTIFY channel name needs no quoting. */
export const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,39}$/;

export function schemaNames(schema: string): SchemaNames {
  if (!SCHEMA_NAME.test(schema))
    throw new TypeError(`schema name ${JSON.stringify(schema)} must match ${SCHEMA_NAME}`);
  const q = quoteIdent(schema);
  const t = (name: string) => sql.raw(`${q}.${quoteIdent(name)}`);
  return {
    schema,
    runs: t('runs'),
    steps: t('steps'),
    policies: t('policies'),
    ready: t('ready'),
    turnQueue: t('turn_queue'),
    attemptRecords: t('attempt_records'),
    attempts: t('attempts'),
    events: t('events'),
    runEvents: t('run_events'),
    fences: t('fences'),
    signals: t('signals'),
    flowKeys: t('flow_keys'),
    runWatchers: t('run_watchers'),
    runWatched: sql.raw(`${q}."run_watched"`),
    schedules: t('schedules'),
    clockOffset: t('clock_offset'),
    nextToken: sql.raw(`nextval('${q}."fencing_token_seq"')`),
    now: sql.raw(`${q}."now"()`),
    readyDue: sql.raw(`${q}."ready_due"`),
    readyExpiring: sql.raw(`${q}."ready_expiring"`),
    readyRotate: sql.raw(`${q}."ready_rotate"`),
    turnQueueDue: sql.raw(`${q}."turn_queue_due"`),
    policyId: sql.raw(`${q}."policy_id"`),
    retryDelayMs: sql.raw(`${q}."retry_delay_ms"`),
    channel: `palisade_${schema}`,
  };
}

/** A timestamptz from ms since the Unix epoch (a bigint-safe integer expression): exact, no float rounding. */
export function msTimestamp(expr: SQL): SQL {
  return sql`('epoch'::timestamptz + (${expr})::bigint * interval '1 millisecond')`;
}

/** A timestamptz as ms since the Unix epoch (float8; whole ms for times written by {@link msTimestamp}). */
export function timestampMs(expr: SQL): SQL {
  return sql`round(extract(epoch FROM ${expr}) * 1000)::float8`;
}

/** Milliseconds as an interval: `${ms(expr)}`. */
export function msInterval(expr: SQL): SQL {
  return sql`((${expr}) * interval '1 millisecond')`;
}
