import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import {
  fencedResultColumns,
  rejectionCtes,
  runLockCte,
  settleFencedResult,
  stepFence,
  type AttemptRef,
  type FencedResultRow,
} from './fenced-outcome.js';
import type { SchemaNames } from './schema-names.js';

export interface CompleteStepParams extends AttemptRef {
  readonly nonce: string;
  readonly output: unknown;
}

/**
 * Record a step's result (invariant 4; I3, I7): one statement that, only if the fence holds, sets the step
 * `completed` with its output, ends the attempt row, appends the step's single terminal event (a unique index
 * allows one per step), completes a standalone run (with its terminal event and a NOTIFY for result waiters)
 * or wakes a workflow run's next turn. Idempotent: if the fence fails because this very attempt's completion
 * already committed (`ended_nonce` is ours and the step is `completed`), it reports `replayed`. Otherwise the
 * rejection is recorded in the same statement and {@link LeaseLostError} is thrown.
 * Locks, in the one order (invariant 14): the run row (`run_lock`), then the step row.
 */
export async function completeStep(
  db: Database,
  n: SchemaNames,
  p: CompleteStepParams,
): Promise<'applied' | 'replayed'> {
  const output = JSON.stringify(p.output ?? null);
  const rows = await db.rows<FencedResultRow>(sql`
    WITH ${runLockCte(n, p.stepId)},
    applied AS (
      UPDATE ${n.steps} s
         SET status = 'completed', output = ${output}::jsonb, error = NULL, ended_nonce = s.nonce,
             finished_at = ${n.now}, next_run_at = NULL
       WHERE ${stepFence(n, 's', p)} AND s.run_id IN (SELECT id FROM run_lock)
      RETURNING s.id, s.run_id, s.attempt, s.epoch, s.fencing_token, s.worker_id),
    ended AS (
      UPDATE ${n.attempts} a SET outcome = 'completed', ended_at = ${n.now}
        FROM applied WHERE a.fencing_token = applied.fencing_token
      RETURNING 1),
    step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, terminal, at)
      SELECT run_id, id, 'step:completed', attempt, epoch, fencing_token, worker_id, true, ${n.now} FROM applied
      RETURNING 1),
    finished_run AS (
      UPDATE ${n.runs} r SET status = 'completed', output = ${output}::jsonb, finished_at = ${n.now}
       WHERE r.id IN (SELECT run_id FROM applied) AND r.kind = 'activity' AND r.status IN ('pending', 'running')
      RETURNING r.id),
    run_event AS (
      INSERT INTO ${n.events} (run_id, type, terminal, at)
      SELECT id, 'run:completed', true, ${n.now} FROM finished_run
      RETURNING 1),
    woken_run AS (
      UPDATE ${n.runs} r SET turn_next_run_at = least(coalesce(r.turn_next_run_at, ${n.now}), ${n.now}),
                           wake_count = r.wake_count + 1
       WHERE r.id IN (SELECT run_id FROM applied) AND r.kind = 'workflow' AND r.status IN ('pending', 'running')
      RETURNING r.id, r.queue),
    notified AS (
      SELECT pg_notify(${n.channel}, 'run:' || id::text) FROM finished_run
      UNION ALL SELECT pg_notify(${n.channel}, 'turn:' || queue) FROM woken_run),
    ${rejectionCtes(n, { ...p, operation: 'complete', replayWhen: sql`cur.status = 'completed' AND cur.ended_nonce = ${p.nonce}::uuid AND cur.fencing_token = ${p.token.toString()}::bigint` })}
    SELECT ${fencedResultColumns},
           (SELECT count(*) FROM ended) + (SELECT count(*) FROM step_event) + (SELECT count(*) FROM run_event)
             + (SELECT count(*) FROM notified) AS effects`);
  return settleFencedResult(rows[0], p, 'complete');
}
