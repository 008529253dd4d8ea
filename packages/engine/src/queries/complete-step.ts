import { sql } from 'drizzle-orm';
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
import { notifyOnce } from './notify.js';
import type { SchemaNames } from './schema-names.js';

export interface CompleteStepParams extends AttemptRef {
  readonly nonce: string;
  readonly output: unknown;
}

/**
 * Record the results of a batch of attempts (invariant 4; I3, I7) in one statement that fences every row on its
 * own: for each attempt whose fence holds, set its step `completed` with its output, end its attempt row, append
 * the step's single terminal event (a unique index allows one per step), complete a standalone run (its
 * `run:completed` is read off the run row: see the `run_events` view) or wake a workflow run's next turn, and
 * send one NOTIFY for the whole batch (result waiters, turn queues: {@link notifyOnce}). A row whose fence fails
 * because this very attempt's completion already committed (`ended_nonce` is its own and the step is
 * `completed`) is `replayed`; any other such row is rejected and recorded in the same statement, without
 * touching its neighbours. The input is one jsonb parameter, so one prepared statement serves every batch size.
 * Locks, in the one order (invariant 14): the runs (`run_lock`, by id), then the steps (`step_lock`, by id).
 * @param batch at most one attempt per step.
 * @returns one row per attempt, in the order given.
 */
export async function completeSteps(
  db: Database,
  n: SchemaNames,
  batch: readonly CompleteStepParams[],
): Promise<FencedResultRow[]> {
  const rows = await db.rows<FencedResultRow>(sql`
    WITH ${fencedInputCte(batch.map((p) => ({ ...p, payload: p.output ?? null })))},
    ${runLockCte(n)},
    applied AS (
      UPDATE ${n.steps} s
         SET status = 'completed', output = i.payload, error = NULL, ended_nonce = s.nonce,
             finished_at = ${n.now}, next_run_at = NULL
        FROM inp i
       WHERE ${stepFenceOnInput(n, 's')} AND s.id IN (SELECT id FROM step_lock)
      RETURNING s.id, s.run_id, s.attempt, s.epoch, s.fencing_token, s.worker_id, i.payload AS output),
    ended AS (
      UPDATE ${n.attempts} a SET outcome = 'completed', ended_at = ${n.now}
        FROM applied WHERE a.fencing_token = applied.fencing_token
      RETURNING 1),
    step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, terminal, at)
      SELECT run_id, id, 'step:completed', attempt, epoch, fencing_token, worker_id, true, ${n.now} FROM applied
      RETURNING 1),
    finished_run AS (
      UPDATE ${n.runs} r SET status = 'completed', output = applied.output, finished_at = ${n.now}
        FROM applied
       WHERE r.id = applied.run_id AND r.kind = 'activity' AND r.status IN ('pending', 'running')
      RETURNING r.id),
    woken_run AS (
      UPDATE ${n.runs} r SET turn_next_run_at = least(coalesce(r.turn_next_run_at, ${n.now}), ${n.now}),
                           wake_count = r.wake_count + 1
       WHERE r.id IN (SELECT run_id FROM applied) AND r.kind = 'workflow' AND r.status IN ('pending', 'running')
      RETURNING r.id, r.queue),
    ${notifyOnce(
      n,
      'notified',
      sql`SELECT 'run:' || id::text FROM finished_run UNION ALL SELECT 'turn:' || queue FROM woken_run`,
    )},
    ${rejectionCtes(n, { operation: 'complete', replayWhen: sql`cur.status = 'completed' AND cur.ended_nonce = cur.stale_nonce AND cur.fencing_token = cur.stale_token` })}
    SELECT ${fencedResultColumns},
           (SELECT count(*) FROM ended) + (SELECT count(*) FROM step_event)
             + (SELECT count(*) FROM notified) AS effects
      FROM inp i ORDER BY i.ord`);
  return rows;
}

/**
 * Record one attempt's result: {@link completeSteps} with a batch of one.
 * @returns `'applied'`, or `'replayed'` when this attempt's completion had already committed.
 * @throws LeaseLostError when the attempt no longer holds the step (recorded as `attempt:stale-rejected`).
 */
export async function completeStep(
  db: Database,
  n: SchemaNames,
  p: CompleteStepParams,
): Promise<'applied' | 'replayed'> {
  const [row] = await completeSteps(db, n, [p]);
  return settleFencedResult(row, p, 'complete');
}
