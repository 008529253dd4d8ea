import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import {
  admitted,
  flowKeyLocks,
  flowKeysBumped,
  runAdmission,
  runKeyHasRoom,
  runSlotKey,
} from './flow-control.js';
import type { HistoryStepRow, PendingSignal } from '../turn/contract.js';
import { scanLimit } from './row-estimates.js';
import { msInterval, type SchemaNames } from './schema-names.js';
import { liveRunStatuses, terminalStepStatuses } from './status-sql.js';

export interface ClaimTurnsParams {
  readonly workerId: string;
  readonly queues: readonly string[];
  readonly workflowNames: readonly string[];
  readonly limit: number;
  /** Lease of one turn, ms. */
  readonly leaseMs: number;
  /** Whether the worker keeps workflow instances (`workflowCacheSize` > 0): only then is `history_news` read. */
  readonly keepsInstances: boolean;
}

/** A workflow run whose next turn this worker now owns. */
export interface ClaimedTurnRow {
  id: string;
  name: string;
  queue: string;
  priority: number;
  input: unknown;
  turn_attempt: number;
  turn_epoch: number;
  token: string;
  nonce: string;
  wake_count: number;
  cancel_requested: boolean;
  cancel_reason: string | null;
  remaining_ms: number;
  /** The database time of the claim, as epoch ms: timers due by then have fired for this turn. */
  now_ms: number;
  /**
   * The run's start (`started_at`, epoch ms), set by its first turn grant and never changed: the workflow's clock
   * before any outcome reached its code (`TurnParams.startedMs`).
   */
  started_ms: number | null;
  /**
   * What is new in the run's history, for the worker that ran its previous turn and may still hold its workflow
   * instance (see {@link RunHistoryNews}); null when another worker ran that turn, or when the claim's snapshot may
   * not show everything the run row it locked had seen (see `ran_last_turn`).
   */
  history_news: RunHistoryNews | null;
  /**
   * This worker ran the run's previous turn (and keeps instances): its kept instance, if it still has one, may
   * be continued. When `history_news` is null nonetheless (the snapshot missed a writer), the worker reads the news
   * with {@link readHistoryNews} instead of the whole history.
   */
  ran_last_turn: boolean;
  /**
   * The run's pending signals (sent, not yet taken by a wait) in arrival order, as the grant's snapshot saw them;
   * null when there are none. A signal this snapshot missed has woken the run after it (its `wake_count`), or is seen
   * by the turn's commit, which keeps the run due while a pending signal matches a wait.
   */
  signals: PendingSignal[] | null;
}

/** The pending signals of run `runId` as one jsonb array in arrival order, or NULL when it has none. */
export function pendingSignalsJson(n: SchemaNames, runId: SQL): SQL {
  return sql`(SELECT jsonb_agg(jsonb_build_object('id', g.id::text, 'name', g.name, 'payload', g.payload,
                 'received_ms', (extract(epoch FROM g.created_at) * 1000)::float8) ORDER BY g.id)
       FROM ${n.signals} g WHERE g.run_id = ${runId} AND g.consumed_at IS NULL)`;
}

/**
 * The part of a run's history a kept workflow instance needs to run the next turn, read by the claim in the same
 * snapshot: how many live (not retired) steps the run has and the highest `delivered_seq` among them — what a
 * worker compares with what its instance expects, so that any change it did not make forces a full replay — and
 * the steps whose outcome no turn has delivered yet (`fresh`: activities that ended, timers that ended or are due
 * by the claim's time), in position order.
 */
export interface RunHistoryNews {
  live_steps: number;
  max_delivered_seq: number;
  fresh: HistoryStepRow[];
}

/**
 * Claim up to `limit` workflow runs whose next turn is due (a turn is an attempt: DESIGN.md §4, last paragraph).
 * Eligible: `pending`/`running` workflow runs with `turn_next_run_at` due and no live turn lease. Locks: `FOR
 * NO KEY UPDATE SKIP LOCKED` on the run rows; the UPDATE re-checks the lease on the locked version. Each claimed run
 * takes a fresh token from the global sequence and a fresh nonce, and its turn an attempts row (kind `turn`),
 * so two workers can never both advance one run: the turn's commit is fenced on (token, nonce, lease).
 *
 * For a run whose previous turn this worker ran, the claim also reads what is new in its history
 * (`history_news`), so a worker that kept the run's workflow instance replays only that. The steps are read in the
 * statement's snapshot, while the run row is locked in its newest version: a writer that committed in between
 * (a completion, a cancel, a turn's commit) is in the row but not in the steps read. So the news is returned only
 * when the row version the snapshot sees is the one locked (same `xmin`); every writer of a workflow run's history
 * also writes its run row, in the same transaction. Otherwise null: the worker that ran the previous turn reads
 * the news with {@link readHistoryNews}, any other the whole history.
 *
 * Flow control (flow-control.ts): the first turn of a `pending` run with a concurrency key is claimed only when
 * the claim may admit it under its key, as claimSteps admits steps; the scan skips such runs whose key is full.
 */
export async function claimTurns(
  db: Database,
  n: SchemaNames,
  p: ClaimTurnsParams,
): Promise<ClaimedTurnRow[]> {
  if (p.queues.length === 0 || p.workflowNames.length === 0 || p.limit <= 0) return [];
  // The scan locks up to scanLimit(limit) rows (see claimSteps); `locked` takes the first `limit` of them.
  const scan = scanLimit(p.limit);
  return db.rows<ClaimedTurnRow>(sql`
    WITH clock AS MATERIALIZED (SELECT ${n.now} AS t),
    -- The due rows of the turn queue in claim order, locked and never waited for. A row is scheduling state only
    -- (it may be stale: a run it names may have committed its turn or be held since): each is judged on its run
    -- row below. The run is read here (unlocked) only to pass over a pending run whose concurrency key is full, so
    -- that such runs never fill the LIMIT, as they did not when the claim read the runs' own index.
    queued AS MATERIALIZED (
      SELECT q.ctid AS qctid, q.run_id, q.queue, q.priority, q.due_at, q.name
        FROM ${n.turnQueue} q LEFT JOIN ${n.runs} r ON r.id = q.run_id
       WHERE q.queue IN ${p.queues} AND q.name IN ${p.workflowNames} AND q.due_at <= (SELECT t FROM clock)
         AND ${runKeyHasRoom(n, sql`r`)}
       ORDER BY q.priority DESC, q.due_at
       LIMIT ${scan}
       FOR UPDATE OF q SKIP LOCKED),
    -- Their runs, locked in their newest versions (SKIP LOCKED: a run another statement holds is left for later).
    locked AS MATERIALIZED (
      SELECT r.id, r.kind, r.status, r.name, r.queue, r.priority, r.turn_next_run_at, r.turn_lease_expires_at,
             r.turn_token, r.turn_worker_id, r.concurrency_key, r.concurrency_limit, r.xmin::text AS locked_xmin
        FROM ${n.runs} r
       WHERE r.id IN (SELECT run_id FROM queued ORDER BY priority DESC, due_at LIMIT ${p.limit})
         FOR NO KEY UPDATE OF r SKIP LOCKED),
    -- Eligibility is judged on the locked run row, as the claim judged it when it read the runs: a live workflow
    -- run, its turn due by the database clock and no live turn lease (DESIGN.md invariant 1), and room under its
    -- concurrency key for a pending run's first turn.
    picked AS (
      SELECT r.id, r.turn_token AS prev_token,
             ${p.keepsInstances}::boolean AND r.turn_worker_id IS NOT DISTINCT FROM ${p.workerId} AS ran_last_turn,
             r.locked_xmin,
             -- Flow control (flow-control.ts): a pending run with a concurrency key needs a place for its first turn.
             r.name, r.concurrency_key, r.priority, r.turn_next_run_at AS due_at, r.concurrency_limit,
             CASE WHEN r.concurrency_key IS NOT NULL AND r.status = 'pending' THEN ${runSlotKey(sql`r`)} END AS slot_key,
             NULL::text AS rate_id, NULL::int AS rate_limit, NULL::int AS rate_period_ms
        FROM locked r
       WHERE r.kind = 'workflow' AND r.queue IN ${p.queues} AND r.name IN ${p.workflowNames}
         AND r.status IN ${liveRunStatuses}
         AND r.turn_next_run_at <= (SELECT t FROM clock)
         AND (r.turn_lease_expires_at IS NULL OR r.turn_lease_expires_at <= (SELECT t FROM clock))
         AND ${runKeyHasRoom(n, sql`r`)}),
    ${flowKeyLocks(n)}
    -- The grant's clock, read once the picked rows (and their flow-control keys) are locked (see claimSteps): the
    -- turn lease and the attempt's claimed_at start there, and the attempt it took over ends there.
    grant_clock AS MATERIALIZED (
      SELECT ${n.now} AS t FROM (SELECT count(*) FROM picked) locked, (SELECT count(*) FROM key_held) held),
    ${runAdmission(n)}
    claimed AS (
      UPDATE ${n.runs} r
         SET turn_token = ${n.nextToken}, turn_nonce = gen_random_uuid(), turn_epoch = r.turn_epoch + 1,
             turn_attempt = r.turn_attempt + 1, turn_worker_id = ${p.workerId},
             turn_lease_expires_at = (SELECT t FROM grant_clock) + ${msInterval(sql`${p.leaseMs}::int`)},
             status = 'running', started_at = coalesce(r.started_at, (SELECT t FROM grant_clock))
        FROM picked p
       WHERE r.id = p.id AND ${admitted(sql`p`)} AND (r.turn_lease_expires_at IS NULL OR r.turn_lease_expires_at <= (SELECT t FROM grant_clock))
      RETURNING r.id, r.name, r.queue, r.priority, r.input, r.turn_attempt, r.turn_epoch, r.turn_token, r.turn_nonce, r.started_at,
                r.wake_count, r.cancel_requested_at, r.cancel_reason, r.turn_lease_expires_at, p.prev_token, (SELECT t FROM grant_clock) AS t,
                p.ran_last_turn,
                p.ran_last_turn AND p.locked_xmin = (SELECT s.xmin::text FROM ${n.runs} s WHERE s.id = p.id) AS sticky),
    ended_turns AS (
      UPDATE ${n.attemptRecords} a SET outcome = 'lease_expired', ended_at = (SELECT t FROM grant_clock)
        FROM claimed c WHERE a.fencing_token = c.prev_token AND a.outcome IS NULL
      RETURNING 1),
    new_attempts AS (
      INSERT INTO ${n.attemptRecords} (run_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at)
      SELECT id, 'turn', turn_attempt, turn_epoch, turn_token, turn_nonce, ${p.workerId}, (SELECT t FROM grant_clock) FROM claimed
      RETURNING 1),
    ${flowKeysBumped(n, sql`(SELECT id FROM claimed)`)},
    -- A stale queue row (its key is not the one its locked run row calls for: the turn committed, was taken or
    -- moved since, or the run ended or is gone) is corrected here, so no claim meets it again: deleted, and the
    -- run's right row put in its place unless it exists. A claimed run's row is moved by the trigger on runs.
    stale AS MATERIALIZED (
      SELECT qd.qctid, r.id AS run_id, r.queue, r.priority, r.name,
             ${turnQueueDue(n, sql`r`)} AS due
        FROM queued qd LEFT JOIN locked r ON r.id = qd.run_id
       WHERE CASE WHEN r.id IS NULL THEN NOT EXISTS (SELECT 1 FROM ${n.runs} x WHERE x.id = qd.run_id)
                  ELSE (r.queue, r.priority, r.name, ${turnQueueDue(n, sql`r`)})
                         IS DISTINCT FROM (qd.queue, qd.priority, qd.name, qd.due_at) END),
    stale_dropped AS (
      DELETE FROM ${n.turnQueue} q USING stale s WHERE q.ctid = s.qctid
      RETURNING 1),
    stale_replaced AS (
      INSERT INTO ${n.turnQueue} (queue, priority, due_at, run_id, name)
      SELECT DISTINCT s.queue, s.priority, s.due, s.run_id, s.name FROM stale s
       WHERE s.due IS NOT NULL AND s.run_id NOT IN (SELECT id FROM claimed)
         AND NOT EXISTS (SELECT 1 FROM ${n.turnQueue} q
                          WHERE q.queue = s.queue AND q.priority = s.priority AND q.due_at = s.due AND q.run_id = s.run_id)
      RETURNING 1)
    SELECT c.id::text, c.name, c.queue, c.priority, c.input, c.turn_attempt, c.turn_epoch, c.turn_token::text AS token,
           c.turn_nonce::text AS nonce, c.wake_count, c.cancel_requested_at IS NOT NULL AS cancel_requested,
           c.cancel_reason,
           (extract(epoch FROM (c.turn_lease_expires_at - ${n.now})) * 1000)::float8 AS remaining_ms,
           (extract(epoch FROM c.t) * 1000)::float8 AS now_ms,
           (extract(epoch FROM c.started_at) * 1000)::float8 AS started_ms,
           CASE WHEN c.sticky THEN h.news END AS history_news, c.ran_last_turn,
           ${pendingSignalsJson(n, sql`c.id`)} AS signals,
           (SELECT count(*) FROM ended_turns) + (SELECT count(*) FROM new_attempts) + (SELECT count(*) FROM keys_bumped)
             + (SELECT count(*) FROM stale_dropped) + (SELECT count(*) FROM stale_replaced) AS effects
      FROM claimed c
      LEFT JOIN LATERAL (${historyNews(n, sql`c.id`, sql`(extract(epoch FROM c.t) * 1000)::float8`, sql`c.sticky`)}) h ON true`);
}

/**
 * The due time of the `turn_queue` row that run row `r` calls for (`<schema>.turn_queue_due`, migration 0025), or
 * NULL when it calls for none: the later of its turn's due time and its turn lease's end, for a live workflow run
 * with a turn due or held.
 */
export function turnQueueDue(n: SchemaNames, r: SQL): SQL {
  return sql`${n.turnQueueDue}(${r}.kind, ${r}.status, ${r}.turn_next_run_at, ${r}.turn_lease_expires_at)`;
}

/**
 * The {@link RunHistoryNews} of run `runId` as one jsonb value (one row), for a claim of its turn whose DB time
 * is `nowMs` (epoch ms, float8); reads nothing unless `when`. The times are the same expressions as
 * {@link loadRunHistory}'s, and a timer is due by the same float comparison replay makes, so a continued turn
 * sees exactly what a full replay over the same rows would. Reads the run's live steps through
 * `steps_run_id_seq_live_unique` (their count is the check); sends only the fresh ones.
 */
export function historyNews(n: SchemaNames, runId: SQL, nowMs: SQL, when: SQL): SQL {
  const dueMs = sql`(extract(epoch FROM s.next_run_at) * 1000)::float8`;
  const freshOutcome = sql`s.delivered_seq IS NULL AND (
      (s.kind IN ('activity', 'child') AND s.status IN ${terminalStepStatuses})
      OR (s.kind IN ('timer', 'signal')
          AND (s.status IN ('completed', 'cancelled') OR (s.status = 'scheduled' AND ${dueMs} <= ${nowMs}))))`;
  return sql`
    SELECT jsonb_build_object(
             'live_steps', count(*),
             'max_delivered_seq', coalesce(max(s.delivered_seq), 0),
             'fresh', coalesce(jsonb_agg(jsonb_build_object(
                 'id', s.id::text, 'seq', s.seq, 'kind', s.kind, 'name', s.name, 'status', s.status,
                 'output', s.output, 'error', s.error, 'delivered_seq', s.delivered_seq, 'due_ms', ${dueMs},
                 'finished_ms', (extract(epoch FROM s.finished_at) * 1000)::float8) ORDER BY s.seq)
               FILTER (WHERE ${freshOutcome}), '[]'::jsonb)) AS news
      FROM ${n.steps} s
     WHERE s.run_id = ${runId} AND s.retired_at IS NULL AND ${when}`;
}

/**
 * A turn granted outside claimTurns (an eager turn, an eager start) as the jsonb object of a {@link ClaimedTurnRow}:
 * `w` names the run row as the grant wrote it (its turn columns, cancel request and reason), `nowMs` the grant's
 * DB time (epoch ms, float8), `historyNews` the run's news or NULL.
 */
export function grantedTurnJson(
  n: SchemaNames,
  w: SQL,
  p: {
    nowMs: SQL;
    historyNews: SQL;
    ranLastTurn?: SQL;
    /** The run's pending signals; by default read ({@link pendingSignalsJson}). NULL for a run just created. */
    signals?: SQL;
  },
): SQL {
  return sql`jsonb_build_object(
    'id', ${w}.id::text, 'name', ${w}.name, 'queue', ${w}.queue, 'priority', ${w}.priority, 'input', ${w}.input,
    'turn_attempt', ${w}.turn_attempt, 'turn_epoch', ${w}.turn_epoch, 'token', ${w}.turn_token::text,
    'nonce', ${w}.turn_nonce::text, 'wake_count', ${w}.wake_count,
    'cancel_requested', ${w}.cancel_requested_at IS NOT NULL, 'cancel_reason', ${w}.cancel_reason,
    'remaining_ms', (extract(epoch FROM (${w}.turn_lease_expires_at - ${n.now})) * 1000)::float8,
    'now_ms', ${p.nowMs}, 'started_ms', (extract(epoch FROM ${w}.started_at) * 1000)::float8, 'history_news', ${p.historyNews}, 'ran_last_turn', ${p.ranLastTurn ?? sql`false`},
    'signals', ${p.signals ?? pendingSignalsJson(n, sql`${w}.id`)})`;
}

/**
 * The {@link RunHistoryNews} of run `runId` for its turn granted at DB time `nowMs` (epoch ms), read in a
 * snapshot of its own: for the worker that holds the turn and ran the previous one, when the grant could not
 * tell it the news (see {@link ClaimedTurnRow.history_news}). Like {@link loadRunHistory} (a plain read of what
 * has committed by now), but sends only the fresh steps. The worker's kept instance is continued only if the
 * counts match what it expects (canContinue).
 */
export async function readHistoryNews(
  db: Database,
  n: SchemaNames,
  runId: string,
  nowMs: number,
): Promise<RunHistoryNews | null> {
  const rows = await db.rows<{ news: RunHistoryNews }>(
    historyNews(n, sql`${runId}::uuid`, sql`${nowMs}::float8`, sql`true`),
  );
  return rows[0]?.news ?? null;
}

/** A run's recorded steps in position order; plain read. */
export async function loadRunHistory(db: Database, n: SchemaNames, runId: string): Promise<HistoryStepRow[]> {
  return db.rows<HistoryStepRow>(sql`
    SELECT id::text, seq, kind, name, status, output, error, delivered_seq,
           (extract(epoch FROM next_run_at) * 1000)::float8 AS due_ms,
           (extract(epoch FROM finished_at) * 1000)::float8 AS finished_ms
      FROM ${n.steps} WHERE run_id = ${runId}::uuid AND retired_at IS NULL ORDER BY seq`);
}

/**
 * How long until the next turn on these queues is due (a timer, a wake-up, an expired turn lease), by the DB
 * clock: the earliest `due_at` of `turn_queue` (a held turn's row is due at its lease's end), less the pending
 * runs whose concurrency key is full. No locks. @returns ms to wait (≤ 0: due now), or null when none is pending.
 */
export async function msUntilNextDueTurn(
  db: Database,
  n: SchemaNames,
  p: { queues: readonly string[]; workflowNames: readonly string[] },
): Promise<number | null> {
  if (p.queues.length === 0 || p.workflowNames.length === 0) return null;
  const rows = await db.rows<{ wait_ms: number | null }>(sql`
    SELECT (extract(epoch FROM (min(q.due_at) - ${n.now})) * 1000)::float8 AS wait_ms
      FROM ${n.turnQueue} q LEFT JOIN ${n.runs} r ON r.id = q.run_id
     WHERE q.queue IN ${p.queues} AND q.name IN ${p.workflowNames} AND ${runKeyHasRoom(n, sql`r`)}`);
  return rows[0]?.wait_ms ?? null;
}
