import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { msInterval, type SchemaNames } from './schema-names.js';

/*
 * Flow control in the claim statements (issue 14): per-key concurrency of activity steps and workflow runs, and
 * per-key rate limits of activity starts. These are the SQL parts claimSteps and claimTurns share.
 *
 * The race to prevent: two claims, each reading "1 of 2 running" for a key in its own snapshot, each admit one
 * more, and 3 run. Counting is not enough under READ COMMITTED, since a claim's snapshot is taken when its
 * statement starts. So every claim that admits work under a key also locks the key's `flow_keys` row (SKIP
 * LOCKED: it never waits) and bumps its `version`, in the same statement. A claim then admits under a key only
 * when it holds that row and the version it locked equals the version its snapshot shows. If another claim
 * admitted under the key after this snapshot was taken, the locked (newest) version is higher, and this claim
 * admits nothing under the key this time. The snapshot's count of running work then includes every admission
 * ever made under the key; an ending it missed only makes it count one too many, never one too few.
 *
 * Rejected: a running counter on the key row, kept by every statement that ends an attempt or a run. That means
 * a dozen paths on the hot path, and one that forgot would leak a place forever. The count here is read off the
 * rows themselves, so an ending needs no bookkeeping. Also rejected: advisory locks, which cannot tell a claim
 * that its snapshot is older than another claim's admission.
 *
 * Head-of-line blocking: the claims' candidate scans skip scheduled work whose key is full in their snapshot
 * ({@link stepKeyHasRoom}, {@link runKeyHasRoom}), so a full key never fills a claim's LIMIT. Work over a rate
 * limit gets a due time when the window has room again, and leaves the scan until then.
 */

/** The flow-control key of a step's concurrency key (`step/<activity>/<key>`); `s` names a steps row. */
export function stepSlotKey(s: SQL): SQL {
  return sql`'step/' || ${s}.name || '/' || ${s}.concurrency_key`;
}

/** The flow-control key of a step's rate key (`rate/<activity>/<key>`); `s` names a steps row. */
export function stepRateKey(s: SQL): SQL {
  return sql`'rate/' || ${s}.name || '/' || ${s}.rate_key`;
}

/** The flow-control key of a workflow run's concurrency key (`run/<workflow>/<key>`); `r` names a runs row. */
export function runSlotKey(r: SQL): SQL {
  return sql`'run/' || ${r}.name || '/' || ${r}.concurrency_key`;
}

/**
 * A flow-control key as a text parameter (the same text as {@link stepSlotKey}, {@link stepRateKey} and
 * {@link runSlotKey} build in SQL), or NULL without `key`.
 */
export function flowKeyOf(kind: 'step' | 'rate' | 'run', name: string, key: string | undefined): SQL {
  return sql`${key === undefined ? null : `${kind}/${name}/${key}`}::text`;
}

/**
 * The number of running steps of the activity and concurrency key of steps row `s` (the snapshot's), read off
 * `steps_running_concurrency_key_idx` (the generated `running_concurrency_key`: the key while the step runs).
 */
function runningStepsOfKey(n: SchemaNames, s: SQL): SQL {
  return sql`(SELECT count(*) FROM ${n.steps} k
     WHERE k.name = ${s}.name AND k.running_concurrency_key = ${s}.concurrency_key)`;
}

/**
 * The number of running runs of the workflow and concurrency key of runs row `r` (the snapshot's), read off
 * `runs_live_concurrency_key_idx`: the key's live runs only, however many have finished.
 */
function runningRunsOfKey(n: SchemaNames, r: SQL): SQL {
  return sql`(SELECT count(*) FROM ${n.runs} k
     WHERE k.name = ${r}.name AND k.live_concurrency_key = ${r}.concurrency_key AND k.status = 'running'
       AND k.kind = 'workflow')`;
}

/**
 * A predicate on steps row `s`: it takes no new place under a concurrency key (it has none, or it runs already
 * and keeps its place when reclaimed), or its key has room in this snapshot. Uses `steps_running_concurrency_key_idx`.
 */
export function stepKeyHasRoom(n: SchemaNames, s: SQL): SQL {
  return sql`(${s}.concurrency_key IS NULL OR ${s}.status = 'running'
       OR ${runningStepsOfKey(n, s)} < ${s}.concurrency_limit)`;
}

/**
 * A predicate on runs row `r`: its turn takes no new place under a concurrency key (it has none, or the run has
 * started: only a `pending` run's first turn takes one), or its key has room in this snapshot. Uses
 * `runs_concurrency_key_idx`.
 */
export function runKeyHasRoom(n: SchemaNames, r: SQL): SQL {
  return sql`(${r}.concurrency_key IS NULL OR ${r}.status <> 'pending' OR ${runningRunsOfKey(n, r)} < ${r}.concurrency_limit)`;
}

/**
 * The CTEs that lock the flow-control keys of the candidates in CTE `picked` (columns `slot_key` and `rate_id`,
 * NULL when the row needs none): `key_seen` (their versions in the statement's snapshot) and `key_held` (the rows
 * this claim locked, newest versions; SKIP LOCKED, in key order). Ends with a comma.
 */
export function flowKeyLocks(n: SchemaNames): SQL {
  return sql`
    key_ids AS MATERIALIZED (
      SELECT slot_key AS key FROM picked WHERE slot_key IS NOT NULL
      UNION SELECT rate_id FROM picked WHERE rate_id IS NOT NULL),
    key_seen AS MATERIALIZED (
      SELECT k.key, k.version FROM ${n.flowKeys} k WHERE k.key IN (SELECT key FROM key_ids)),
    key_held AS MATERIALIZED (
      SELECT k.key, k.version, k.recent FROM ${n.flowKeys} k WHERE k.key IN (SELECT key FROM key_ids)
       ORDER BY k.key FOR NO KEY UPDATE OF k SKIP LOCKED),`;
}

/**
 * CTE `admission` (one row per row of `picked`: `id`, `admitted`, `deferred_until`), after
 * {@link flowKeyLocks} and a CTE `grant_clock` (`t`). A row is admitted when it needs no key, or when this claim
 * holds each key it needs unchanged since its snapshot (`key_fresh`) and:
 * - concurrency: its rank among the picked rows of its key (priority, then due time) plus the key's running
 *   count (`running`: an expression on `p`) is at most its limit;
 * - rate: its rank among the picked rows of its rate key that have a place, plus the starts inside the window
 *   ending at the grant, is at most its rate limit. One that is not gets `deferred_until`: when the oldest start
 *   in the window leaves it. Ends with a comma.
 */
function admission(running: SQL): SQL {
  const windowStart = sql`g.t - ${msInterval(sql`p.rate_period_ms`)}`;
  return sql`
    key_fresh AS MATERIALIZED (
      SELECT h.key, h.recent FROM key_held h JOIN key_seen s ON s.key = h.key AND s.version = h.version),
    slots AS MATERIALIZED (
      SELECT p.id,
             p.slot_key IS NULL OR (p.slot_key IN (SELECT key FROM key_fresh)
               AND row_number() OVER (PARTITION BY p.slot_key ORDER BY p.priority DESC, p.due_at, p.id) + ${running}
                   <= p.concurrency_limit) AS slot_ok
        FROM picked p),
    rates AS MATERIALIZED (
      SELECT p.id, s.slot_ok, p.rate_id, p.rate_limit, p.rate_period_ms, f.key IS NOT NULL AS rate_fresh,
             row_number() OVER (PARTITION BY p.rate_id, s.slot_ok ORDER BY p.priority DESC, p.due_at, p.id) AS rate_rank,
             (SELECT count(*) FROM unnest(f.recent) x(t) WHERE x.t > ${windowStart}) AS in_window,
             (SELECT min(x.t) FROM unnest(f.recent) x(t) WHERE x.t > ${windowStart}) AS oldest,
             g.t AS grant_t
        FROM picked p JOIN slots s ON s.id = p.id LEFT JOIN key_fresh f ON f.key = p.rate_id CROSS JOIN grant_clock g),
    admission AS MATERIALIZED (
      SELECT r.id,
             r.slot_ok AND (r.rate_id IS NULL OR (r.rate_fresh AND r.rate_rank + r.in_window <= r.rate_limit)) AS admitted,
             CASE WHEN r.rate_id IS NOT NULL AND r.slot_ok AND r.rate_fresh AND r.rate_rank + r.in_window > r.rate_limit
                  THEN coalesce(r.oldest, r.grant_t) + ${msInterval(sql`r.rate_period_ms`)} END AS deferred_until
        FROM rates r),`;
}

/**
 * A predicate on picked row `p`: the claim may take it. A row that needs no key is taken without reading CTE
 * `admission` at all: that CTE (its window functions over the picked rows) is computed only when a picked row
 * needs a place or a start under a key, so a claim of unkeyed work pays for none of it.
 */
export function admitted(p: SQL): SQL {
  return sql`((${p}.slot_key IS NULL AND ${p}.rate_id IS NULL) OR ${p}.id IN (SELECT id FROM admission WHERE admitted))`;
}

/** {@link admission} for claimSteps: `picked` rows are steps rows. */
export function stepAdmission(n: SchemaNames): SQL {
  return admission(runningStepsOfKey(n, sql`p`));
}

/** {@link admission} for claimTurns: `picked` rows are runs rows (no rate limits: `rate_id` is NULL). */
export function runAdmission(n: SchemaNames): SQL {
  return admission(runningRunsOfKey(n, sql`p`));
}

/**
 * CTE `keys_bumped`: every flow-control key under which the claim admitted work (`admitted_ids`: a subquery of
 * the ids it claimed) gets `version + 1`; a rate key also records the grant time once per start and forgets the
 * starts older than its window. Only rows this statement holds (`key_held`) are written.
 */
export function flowKeysBumped(n: SchemaNames, admittedIds: SQL): SQL {
  return sql`
    key_use AS MATERIALIZED (
      SELECT p.slot_key AS key, NULL::int AS period_ms FROM picked p WHERE p.slot_key IS NOT NULL AND p.id IN ${admittedIds}
      UNION ALL
      SELECT p.rate_id, p.rate_period_ms FROM picked p WHERE p.rate_id IS NOT NULL AND p.id IN ${admittedIds}),
    keys_bumped AS (
      UPDATE ${n.flowKeys} k
         SET version = k.version + 1,
             recent = CASE WHEN k.key LIKE 'rate/%' THEN ARRAY(
                 SELECT x.t FROM unnest(k.recent) x(t)
                  WHERE x.t > g.t - ${msInterval(sql`(SELECT max(u.period_ms) FROM key_use u WHERE u.key = k.key)`)}
                 UNION ALL SELECT g.t FROM key_use u WHERE u.key = k.key
                 ORDER BY 1)
               ELSE k.recent END
        FROM grant_clock g
       WHERE k.key IN (SELECT key FROM key_use) AND k.key IN (SELECT key FROM key_held)
      RETURNING 1)`;
}

/**
 * CTEs `flow_keys_kept` and `flow_keys_made`: inserts the flow-control keys `keys` (a subquery of one text column,
 * NULLs ignored) that do not exist yet, in key order (two statements inserting the same new keys wait on each other
 * in one order). An existing key is first locked `FOR KEY SHARE`, which no claim's lock conflicts with: only the
 * retention sweep's, which deletes keys no live work holds ({@link lockIdleFlowKeys}). The race it prevents: the
 * insert finds the key (no conflict to resolve), the sweep, which cannot see the insert's uncommitted work, deletes
 * it, and the new work waits forever for a key row no claim can lock. With the lock, either the sweep skips the
 * key (SKIP LOCKED), or the insert waits for the sweep's commit, finds the row gone, and inserts it afresh. Ends
 * with a comma.
 */
export function flowKeysInserted(n: SchemaNames, keys: SQL): SQL {
  return sql`
    flow_keys_kept AS MATERIALIZED (
      SELECT count(*) AS n FROM (
        SELECT k.key FROM ${n.flowKeys} k WHERE k.key IN (SELECT x.key FROM (${keys}) x(key))
         ORDER BY k.key FOR KEY SHARE OF k) y),
    flow_keys_made AS (
      INSERT INTO ${n.flowKeys} (key)
      SELECT DISTINCT x.key FROM (${keys}) x(key) WHERE x.key IS NOT NULL AND (SELECT n FROM flow_keys_kept) >= 0
       ORDER BY 1
      ON CONFLICT DO NOTHING
      RETURNING 1),`;
}

/** The longest rate-limit period (ms) a step may have (the sdk's `RateLimit.periodMs` is at most a day). */
const MAX_RATE_PERIOD_MS = 86_400_000;

/**
 * A predicate on flow_keys row `k`: no live work holds the key — no `pending` or `running` workflow run under a
 * run key (`runs_live_concurrency_key_idx`), no `scheduled` or `running` step under a step or rate key
 * (`steps_live_flow_name_idx`: the generated `live_flow_name`) — and, for a rate key, no start within the longest rate period.
 */
function flowKeyIdle(n: SchemaNames): SQL {
  return sql`k.key NOT IN (
        SELECT 'run/' || r.name || '/' || r.live_concurrency_key FROM ${n.runs} r WHERE r.live_concurrency_key IS NOT NULL
        UNION ALL
        SELECT 'step/' || s.name || '/' || s.concurrency_key FROM ${n.steps} s
         WHERE s.live_flow_name IS NOT NULL AND s.concurrency_key IS NOT NULL
        UNION ALL
        SELECT 'rate/' || s.name || '/' || s.rate_key FROM ${n.steps} s
         WHERE s.live_flow_name IS NOT NULL AND s.rate_key IS NOT NULL)
     AND NOT EXISTS (SELECT 1 FROM unnest(k.recent) x(t) WHERE x.t > ${n.now} - ${msInterval(sql`${MAX_RATE_PERIOD_MS}::float8`)})`;
}

/**
 * First statement of the retention sweep's deletion of idle flow-control keys, in its transaction: lock at most
 * `limit` keys that no live work holds in this snapshot (see flowKeyIdle), `FOR UPDATE SKIP LOCKED` — a key a claim
 * or an insert holds now is left for a later sweep. @returns the keys locked.
 */
export async function lockIdleFlowKeys(tx: Database, n: SchemaNames, limit: number): Promise<string[]> {
  const rows = await tx.rows<{ key: string }>(sql`
    SELECT k.key FROM ${n.flowKeys} k WHERE ${flowKeyIdle(n)}
     ORDER BY k.key LIMIT ${limit} FOR UPDATE OF k SKIP LOCKED`);
  return rows.map((r) => r.key);
}

/**
 * Second statement, in the same transaction: delete the locked `keys` that are still idle in a snapshot taken now,
 * after the locks: work inserted under a key before it was locked has committed by then (its insert held the key
 * `FOR KEY SHARE`, see {@link flowKeysInserted}) and is seen; work inserted later waits for this commit and
 * inserts the key again. A claim cannot have admitted under a locked key (it locks the row itself, SKIP LOCKED),
 * and a claim whose snapshot saw the deleted row never holds it: its versions protocol admits nothing then.
 * @returns how many keys were deleted.
 */
export async function deleteIdleFlowKeys(
  tx: Database,
  n: SchemaNames,
  keys: readonly string[],
): Promise<number> {
  if (keys.length === 0) return 0;
  const rows = await tx.rows<{ n: number }>(sql`
    WITH gone AS (
      DELETE FROM ${n.flowKeys} k
       WHERE k.key IN (SELECT jsonb_array_elements_text(${JSON.stringify(keys)}::jsonb)) AND ${flowKeyIdle(n)}
      RETURNING 1)
    SELECT count(*)::int AS n FROM gone`);
  return Number(rows[0]?.n ?? 0);
}
