import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { grantColumns, recordEndedGrants } from './ended-grants.js';
import { msInterval, type SchemaNames } from './schema-names.js';
import { liveStepStatuses, unsuccessfulStatuses } from './status-sql.js';
import { isUnsuccessfulStatus, type RunStatus } from '../turn/state-machine.js';

/**
 * Retry a `failed` or `cancelled` run from its recorded history (Temporal's reset, DBOS's resume): its failed
 * and cancelled steps return to `scheduled`, due now, with a fresh retry budget (`attempt = 0`); completed steps
 * keep their results and are not executed again. A workflow run's next turn is due now and replays over that
 * history; outcomes delivered after the first reset step are forgotten so they are delivered again in order,
 * and the steps the code scheduled after it saw that first reset outcome (compensation in a `catch`, say) are
 * retired: kept with their attempts and events, marked `retired_at`, and no longer part of the replayed history.
 * Tokens and epochs are kept: the next claim takes a higher token and epoch + 1 (invariant 6), so anything
 * earlier attempts held stays fenced; a step re-created at a retired position inherits its fencing scope and
 * epoch (see commitTurn). One transaction: the run row is locked first, in a statement of its own, and what the
 * call reports is read there — the run as it is once this call holds it: a run deleted (pruned) or retried while
 * the call waited for its lock is reported as gone or as it now is, never as it was read before the wait. Then
 * one statement, which begins once the run row is held, locks its steps by id (invariant 14) and resets them.
 * @returns the run's status as locked (`retried` when this call reset it), or undefined when no such run exists.
 */
export async function retryRun(
  db: Database,
  n: SchemaNames,
  runId: string,
): Promise<{ status: RunStatus; retried: boolean } | undefined> {
  // Not a run id at all: no such run (as in readRun), rather than a uuid cast error from the database.
  if (!/^[0-9a-f-]{36}$/i.test(runId)) return undefined;
  return db.transaction(async (tx) => {
    // A locking read returns the row's newest version once the lock is held (READ COMMITTED), and no row when
    // the holder deleted it: the status reported below is the one this call acted on.
    const locked = await tx.rows<{ status: RunStatus }>(sql`
      SELECT status FROM ${n.runs} WHERE id = ${runId}::uuid FOR NO KEY UPDATE`);
    const run = locked[0];
    if (!run) return undefined;
    if (!isUnsuccessfulStatus(run.status)) return { status: run.status, retried: false };
    return { status: run.status, retried: await resetRun(tx, n, runId) };
  });
}

/** The statement of {@link retryRun}, once the run row is locked. @returns false when the run is not failed or cancelled. */
async function resetRun(db: Database, n: SchemaNames, runId: string): Promise<boolean> {
  const rows = await db.rows<{ retried: number }>(sql`
    WITH run AS (
      UPDATE ${n.runs} SET status = 'pending', error = NULL, output = NULL, finished_at = NULL,
                           cancel_requested_at = NULL, cancel_reason = NULL,
                           turn_next_run_at = CASE WHEN kind = 'workflow' THEN ${n.now} END,
                           turn_lease_expires_at = NULL, wake_count = wake_count + 1,
                           -- The history is rewritten: no worker's kept workflow instance may be continued.
                           turn_worker_id = NULL
       WHERE id = ${runId}::uuid AND status IN ${unsuccessfulStatuses}
      RETURNING id, kind, queue),
    -- Then the run's steps, by id (invariant 14: the run row first, then its steps by id). The aggregate makes
    -- every lock be taken before either UPDATE below touches a step.
    locked AS MATERIALIZED (
      SELECT count(*) AS n FROM (
        SELECT s.id FROM ${n.steps} s WHERE s.run_id IN (SELECT id FROM run) ORDER BY s.id FOR NO KEY UPDATE OF s) x),
    first_reset AS (
      SELECT min(s.delivered_seq) AS delivered_seq FROM ${n.steps} s, run
       WHERE s.run_id = run.id AND s.status IN ${unsuccessfulStatuses} AND s.retired_at IS NULL),
    -- Steps the code scheduled after it was handed the first withdrawn outcome (compensation in a catch, a
    -- step after a failed race) belong to the branch that saw it: retired, kept for the record, never replayed.
    -- A retired step that an attempt still holds keeps its lease expiry: the holder's next write is refused as
    -- "retired", and the step re-created at its position is not claimable before that lease ends, so the
    -- holder's signal fires before its successor is granted (invariant 12).
    retired AS (
      UPDATE ${n.steps} s
         SET retired_at = ${n.now},
             status = CASE WHEN s.status IN ${liveStepStatuses} THEN 'cancelled' ELSE s.status END,
             finished_at = CASE WHEN s.status IN ${liveStepStatuses} THEN ${n.now} ELSE s.finished_at END,
             lease_expires_at = CASE WHEN s.ended_nonce IS DISTINCT FROM s.nonce THEN s.lease_expires_at END,
             next_run_at = NULL, cancel_requested_at = NULL
        FROM run
       WHERE s.run_id = run.id AND s.retired_at IS NULL AND (SELECT n FROM locked) >= 0
         AND (s.after_delivered_seq >= (SELECT delivered_seq FROM first_reset)
              -- A child run that failed or was cancelled is not run again: its step is retired, so the replayed
              -- code starts a new child run at that position.
              OR (s.kind = 'child' AND s.status IN ${unsuccessfulStatuses}))
      RETURNING ${grantColumns('s')}, s.seq, s.name),
    -- A signal a retired wait took is pending again: the code that waits for it anew takes it.
    returned_signals AS (
      UPDATE ${n.signals} g SET step_id = NULL, consumed_at = NULL
        FROM retired WHERE g.step_id = retired.id
      RETURNING 1),
    -- So is one the run's end left undelivered: the run goes on, and its code may wait for it yet. (One a wait
    -- refused stays refused: its payload does not fit, however often the code runs.)
    reopened_signals AS (
      UPDATE ${n.signals} g SET consumed_at = NULL, undelivered = NULL
        FROM run WHERE g.run_id = run.id AND g.undelivered->>'reason' = 'run-ended'
      RETURNING 1),
    -- A retired step's grant still open (no outcome of its own, no row) ends cancelled (migration 0029).
    ${recordEndedGrants(n, { name: 'retired_attempts', from: sql`retired`, outcome: sql`'cancelled'`, endedAt: n.now, onlyOpen: true })},
    retired_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, at)
      SELECT ${runId}::uuid, id, 'step:retired', jsonb_build_object('seq', seq, 'name', name), ${n.now} FROM retired
      RETURNING 1),
    reset AS (
      UPDATE ${n.steps} s
         SET status = CASE WHEN s.status IN ${unsuccessfulStatuses} THEN 'scheduled' ELSE s.status END,
             attempt = CASE WHEN s.status IN ${unsuccessfulStatuses} THEN 0 ELSE s.attempt END,
             error = CASE WHEN s.status IN ${unsuccessfulStatuses} THEN NULL ELSE s.error END,
             -- Ended under a live attempt (cancelled by the run's end, say): claimable only when that lease ends.
             next_run_at = CASE WHEN s.status NOT IN ${unsuccessfulStatuses} THEN s.next_run_at
                                -- A signal wait waits again, its timeout (if any) in full.
                                WHEN s.kind = 'signal'
                                  THEN ${n.now} + ${msInterval(sql`(s.input->>'timeoutMs')::float8`)}
                                WHEN s.ended_nonce IS DISTINCT FROM s.nonce
                                  THEN greatest(${n.now}, coalesce(s.lease_expires_at, ${n.now}))
                                ELSE ${n.now} END,
             finished_at = CASE WHEN s.status IN ${unsuccessfulStatuses} THEN NULL ELSE s.finished_at END,
             cancel_requested_at = NULL,
             lease_expires_at = CASE WHEN s.status IN ${unsuccessfulStatuses} THEN NULL ELSE s.lease_expires_at END,
             delivered_seq = CASE WHEN s.delivered_seq >= (SELECT delivered_seq FROM first_reset) THEN NULL
                                  ELSE s.delivered_seq END
        FROM run
       WHERE s.run_id = run.id AND s.retired_at IS NULL AND (SELECT n FROM locked) >= 0
         AND s.after_delivered_seq < coalesce((SELECT delivered_seq FROM first_reset), 2147483647)
         AND (s.status IN ${unsuccessfulStatuses} OR s.delivered_seq >= (SELECT delivered_seq FROM first_reset))
         AND NOT (s.kind = 'child' AND s.status IN ${unsuccessfulStatuses}) -- retired above
      RETURNING s.id, s.run_id, s.epoch, s.fencing_token, s.queue, s.kind, s.status),
    -- The unique "one terminal event per step/run" indexes then admit the retry's outcomes; the earlier
    -- terminal events stay in the history, no longer flagged as the current outcome.
    unflagged AS (
      UPDATE ${n.events} e SET terminal = false
        FROM reset WHERE e.step_id = reset.id AND reset.status = 'scheduled' AND e.terminal
      RETURNING 1),
    unflagged_run AS (
      UPDATE ${n.events} e SET terminal = false
        FROM run WHERE e.run_id = run.id AND e.step_id IS NULL AND e.terminal
      RETURNING 1),
    ev AS (
      INSERT INTO ${n.events} (run_id, type, at) SELECT id, 'run:retry-requested', ${n.now} FROM run
      RETURNING 1),
    notified AS (
      SELECT pg_notify(${n.channel}, 'step:' || queue) FROM reset WHERE kind = 'activity' AND status = 'scheduled'
      UNION ALL SELECT pg_notify(${n.channel}, 'turn:' || queue) FROM run WHERE kind = 'workflow')
    SELECT (SELECT count(*) FROM run)::int AS retried,
           (SELECT count(*) FROM ev) + (SELECT count(*) FROM notified) + (SELECT count(*) FROM unflagged)
             + (SELECT count(*) FROM unflagged_run) + (SELECT count(*) FROM retired_events)
             + (SELECT count(*) FROM retired_attempts) + (SELECT count(*) FROM returned_signals)
             + (SELECT count(*) FROM reopened_signals) AS effects`);
  return (rows[0]?.retried ?? 0) > 0;
}
