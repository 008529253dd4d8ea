import { sql } from 'drizzle-orm';
import type { SerializedFailure } from '@palisade/sdk';
import type { Database } from '../db/database.js';
import {
  fencedInputCte,
  fencedResultColumns,
  rejectionCtes,
  runLockCte,
  settleFencedResult,
  stepFenceOnInput,
  type AttemptRef,
  type FencedResultRow,
} from './fenced-outcome.js';
import { grantColumns, recordEndedGrants } from './ended-grants.js';
import { msInterval, type SchemaNames } from './schema-names.js';
import { endedRunItems, notifyOnce } from './notify.js';
import { liveRunStatuses } from './status-sql.js';
import type { AttemptOutcome } from '../turn/state-machine.js';

/** The outcomes a failure records on its attempt row. */
export type FailedAttemptOutcome = Extract<AttemptOutcome, 'failed' | 'timed_out' | 'cancelled'>;

export interface FailStepParams extends AttemptRef {
  readonly nonce: string;
  readonly error: SerializedFailure;
  /** Decided by the worker from the stored retry policy (`retryDecision`). */
  readonly retry: boolean;
  /** Attempt-row outcome: `failed`, `timed_out` (start-to-close passed) or `cancelled`. */
  readonly outcome?: FailedAttemptOutcome;
}

/**
 * Record the failures of a batch of attempts (I3, I7) in one statement that fences every row on its own, as
 * {@link completeSteps} does for completions. For each attempt whose fence holds: with `retry`, the step goes back
 * to `scheduled` and `next_run_at = now + retry_delay_ms(policy, attempt)` — the backoff is persisted, so it
 * survives worker restarts, and workers find it due by their poll or the next due time a claim returns; without,
 * the step ends `failed` (or `cancelled`) with its terminal event, and a standalone run ends with it (NOTIFY for
 * result waiters) or a workflow's next turn is woken. A row is idempotent on retry after an unknown outcome (this
 * attempt's nonce is the step's `ended_nonce` and the step is not `completed`: `replayed`); any other row whose
 * fence fails is rejected and recorded in the same statement, without touching its neighbours. The batch is one
 * jsonb parameter, so one prepared statement serves every batch size. Locks, in the one order (invariant 14): the
 * runs (`run_lock`, by id), then the steps (`step_lock`, by id).
 * @param batch at most one attempt per step.
 * @returns one row per attempt, in the order given.
 */
export async function failSteps(
  db: Database,
  n: SchemaNames,
  batch: readonly FailStepParams[],
): Promise<FencedResultRow[]> {
  // One time for the whole decision: the persisted retry time and the event that reports it (retryAt − at is
  // exactly the backoff), the step's and the attempt's end.
  const now = sql`(SELECT t FROM clock)`;
  const retry = sql`(i.payload->>'retry')::boolean`;
  // The step's retry policy, read off its policies row (a primary-key read, no lock) only for a retry.
  const retryPolicy = sql`(SELECT pol.retry_policy FROM ${n.policies} pol WHERE pol.id = s.policy_id)`;
  const terminalStatus = sql`CASE WHEN i.payload->>'outcome' = 'cancelled' THEN 'cancelled' ELSE 'failed' END`;
  return db.rows<FencedResultRow>(sql`
    WITH ${fencedInputCte(
      batch.map((p) => ({
        ...p,
        payload: { error: p.error, retry: p.retry, outcome: p.outcome ?? 'failed' },
      })),
    )},
    ${runLockCte(n)},
    -- read once the steps are locked (not before a lock wait)
    clock AS MATERIALIZED (SELECT ${n.now} AS t FROM (SELECT count(*) FROM step_lock) locked),
    applied AS (
      UPDATE ${n.steps} s
         SET status = CASE WHEN ${retry} THEN 'scheduled' ELSE ${terminalStatus} END,
             error = i.payload->'error', ended_nonce = s.nonce,
             next_run_at = CASE WHEN ${retry}
                                THEN ${now} + ${msInterval(sql`${n.retryDelayMs}(${retryPolicy}, s.attempt)`)} END,
             finished_at = CASE WHEN ${retry} THEN NULL ELSE ${now} END
        FROM inp i
       WHERE ${stepFenceOnInput(n, 's')} AND s.id IN (SELECT id FROM step_lock)
      RETURNING ${grantColumns('s')}, s.status, s.next_run_at, s.queue, s.error,
                i.payload->>'outcome' AS outcome, s.concurrency_key),
    ${recordEndedGrants(n, { name: 'ended', from: sql`applied`, outcome: sql`g.outcome`, endedAt: now, error: sql`g.error` })},
    step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, terminal, at)
      SELECT run_id, id,
             CASE WHEN status = 'scheduled' THEN 'attempt:failed' ELSE 'step:' || status END,
             attempt, epoch, fencing_token, worker_id,
             jsonb_build_object('error', error, 'retryAt', next_run_at), status <> 'scheduled', ${now}
        FROM applied
      RETURNING 1),
    finished_run AS (
      UPDATE ${n.runs} r SET status = a.status, error = a.error, finished_at = ${now}
        FROM applied a
       WHERE r.id = a.run_id AND a.status <> 'scheduled'
         AND r.kind = 'activity' AND r.status IN ${liveRunStatuses}
      RETURNING r.id, r.status, r.error),
    run_event AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT id, 'run:' || status, jsonb_build_object('error', error), true, ${now} FROM finished_run
      RETURNING 1),
    woken_run AS (
      UPDATE ${n.runs} r SET turn_next_run_at = least(coalesce(r.turn_next_run_at, ${now}), ${now}),
                           wake_count = r.wake_count + 1
       WHERE r.id IN (SELECT run_id FROM applied WHERE status <> 'scheduled')
         AND r.kind = 'workflow' AND r.status IN ${liveRunStatuses}
      RETURNING r.id, r.queue),
    ${notifyOnce(
      n,
      'notified',
      // A step under a concurrency key gives its place back (retried or not): see completeSteps.
      sql`${endedRunItems(n, sql`finished_run`)} UNION ALL SELECT 'turn:' || queue FROM woken_run
          UNION ALL SELECT 'step:' || queue FROM applied WHERE concurrency_key IS NOT NULL`,
    )},
    ${rejectionCtes(n, {
      operation: 'fail',
      // This attempt's own completion also leaves its nonce in ended_nonce: a failure sent after it is a
      // different write that did not happen — rejected, never reported as replayed.
      replayWhen: sql`cur.status <> 'completed' AND cur.ended_nonce = cur.stale_nonce AND cur.fencing_token = cur.stale_token`,
    })}
    SELECT ${fencedResultColumns},
           (SELECT count(*) FROM ended) + (SELECT count(*) FROM step_event) + (SELECT count(*) FROM run_event)
             + (SELECT count(*) FROM notified) AS effects
      FROM inp i ORDER BY i.ord`);
}

/**
 * Record one failed attempt: {@link failSteps} with a batch of one.
 * @returns `'applied'`, or `'replayed'` when this attempt's failure had already committed.
 * @throws LeaseLostError when the attempt no longer holds the step (recorded as `attempt:stale-rejected`).
 */
export async function failStep(
  db: Database,
  n: SchemaNames,
  p: FailStepParams,
): Promise<'applied' | 'replayed'> {
  const [row] = await failSteps(db, n, [p]);
  return settleFencedResult(row, p, 'fail');
}
