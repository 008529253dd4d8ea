import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { endedRunItems, notifyOnce } from './notify.js';
import { previousGrantColumns, recordReplacedGrants } from './ended-grants.js';
import type { SchemaNames } from './schema-names.js';
import { liveRunStatuses } from './status-sql.js';
import type { UnsuccessfulStatus } from '../turn/state-machine.js';

export interface ExpiredStepRow {
  id: string;
  run_id: string;
  status: UnsuccessfulStatus;
}

/**
 * End the running steps whose lease expired and that must not be reclaimed: their retry budget is used up
 * (attempts are counted at claim, so a job that kills its worker is not retried forever — case F08) or a
 * cancel was requested while their owner was gone. The step ends `failed` with a reason that says the lease
 * expired (or the start-to-close timeout passed), or `cancelled`.
 *
 * The candidates are read off `ready_expiring_idx`: a running step that is to be ended, not reclaimed, has its
 * `ready` row marked `expiring` and due at its lease's end (migration 0024).
 *
 * This is maintenance of running rows, so it is fenced like a claim (invariant 5; I8): `FOR NO KEY UPDATE
 * SKIP LOCKED`, the expiry re-checked on the locked version, and the token bumped from the global sequence in the
 * same statement, so the zombie owner's later writes fail. The same statement ends the attempt row, appends
 * the terminal events, ends a standalone run or wakes a workflow turn, and NOTIFYs result waiters. It never
 * waits for a lock (SKIP LOCKED on the steps and on their runs), so it takes part in no deadlock (invariant 14).
 */
export async function expireSteps(db: Database, n: SchemaNames, limit = 100): Promise<ExpiredStepRow[]> {
  const maxAttempts = sql`s.max_attempts`;
  return db.rows<ExpiredStepRow>(sql`
    WITH clock AS MATERIALIZED (SELECT ${n.now} AS t),
    picked AS (
      SELECT s.id, s.run_id,
             -- The grant it ends, for its attempts row (migration 0029).
             ${previousGrantColumns('s')},
             s.lease_expires_at >= s.attempt_deadline_at AS timed_out,
             s.cancel_requested_at IS NOT NULL AS cancel_requested, ${maxAttempts} AS max_attempts
        FROM ${n.steps} s
       WHERE s.id IN (SELECT r.step_id FROM ${n.ready} r
                       WHERE r.expiring AND r.due_at <= (SELECT t FROM clock)
                       ORDER BY r.due_at LIMIT ${limit})
         AND s.status = 'running' AND s.lease_expires_at <= (SELECT t FROM clock)
         AND (s.cancel_requested_at IS NOT NULL OR s.attempt >= ${maxAttempts})
       FOR NO KEY UPDATE OF s SKIP LOCKED),
    -- The runs it ends or wakes, locked SKIP LOCKED: the sweep never waits (invariant 14); a step whose run a
    -- cancel, retry or turn holds is left for the next sweep.
    run_locks AS MATERIALIZED (
      SELECT r.id FROM ${n.runs} r WHERE r.id IN (SELECT run_id FROM picked) FOR NO KEY UPDATE OF r SKIP LOCKED),
    ended AS (
      UPDATE ${n.steps} s
         SET status = CASE WHEN p.cancel_requested THEN 'cancelled' ELSE 'failed' END,
             fencing_token = ${n.nextToken},
             -- The new token is no claim's: no attempt is read off the step for it (migration 0029).
             claimed_at = NULL, granted_until = NULL, reclaimed_from_token = NULL,
             next_run_at = NULL,
             finished_at = ${n.now},
             error = CASE WHEN p.cancel_requested THEN
                       jsonb_build_object('type', 'CancelledFailure', 'nonRetryable', true,
                         'message', format('cancelled; attempt %s (token %s) lost its lease before acknowledging the cancel',
                                           s.attempt, p.prev_token))
                     ELSE
                       jsonb_build_object('type', CASE WHEN p.timed_out THEN 'StartToCloseTimeout' ELSE 'LeaseExpired' END,
                         'nonRetryable', true,
                         'message', format('attempt %s of %s (token %s) %s; no attempts left', s.attempt, p.max_attempts,
                                           p.prev_token,
                                           CASE WHEN p.timed_out THEN 'passed its start-to-close timeout'
                                                ELSE 'lost its lease: the lease expired (worker lost or stalled)' END))
                     END
        FROM picked p
       WHERE s.id = p.id AND p.run_id IN (SELECT id FROM run_locks)
         AND s.status = 'running' AND s.lease_expires_at <= ${n.now}
      RETURNING s.id, s.run_id, s.status, s.error, s.attempt, s.epoch, p.prev_token),
    ${recordReplacedGrants(n, { name: 'ended_attempts', picked: 'picked', replaced: 'ended' })},
    step_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, data, terminal, at)
      SELECT run_id, id, 'step:' || status, attempt, epoch, prev_token, jsonb_build_object('error', error), true, ${n.now}
        FROM ended
      RETURNING 1),
    finished_runs AS (
      UPDATE ${n.runs} r SET status = e.status, error = e.error, finished_at = ${n.now}
        FROM ended e
       WHERE r.id = e.run_id AND r.kind = 'activity' AND r.status IN ${liveRunStatuses}
      RETURNING r.id, r.status, r.error),
    run_events AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT id, 'run:' || status, jsonb_build_object('error', error), true, ${n.now} FROM finished_runs
      RETURNING 1),
    woken_runs AS (
      UPDATE ${n.runs} r SET turn_next_run_at = least(coalesce(r.turn_next_run_at, ${n.now}), ${n.now}),
                           wake_count = r.wake_count + 1
       WHERE r.id IN (SELECT run_id FROM ended) AND r.kind = 'workflow' AND r.status IN ${liveRunStatuses}
      RETURNING r.id, r.queue),
    ${notifyOnce(
      n,
      'notified',
      sql`${endedRunItems(n, sql`finished_runs`)} UNION ALL SELECT 'turn:' || queue FROM woken_runs`,
    )}
    SELECT e.id::text, e.run_id::text, e.status,
           (SELECT count(*) FROM ended_attempts) + (SELECT count(*) FROM step_events)
             + (SELECT count(*) FROM run_events) + (SELECT count(*) FROM notified) AS effects
      FROM ended e`);
}
