import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * Retry a `failed` or `cancelled` standalone run: its failed or cancelled steps return to `scheduled`, due
 * now, with a fresh retry budget (`attempt = 0`). Tokens and epochs are kept: the next claim takes a higher
 * token from the sequence and epoch + 1 (invariant 6), so anything the earlier attempts held stays fenced.
 * Locks the run row, then its steps. @returns false when the run is not in a retryable state.
 */
export async function retryStandaloneRun(db: Database, n: SchemaNames, runId: string): Promise<boolean> {
  const rows = await db.rows<{ retried: number }>(sql`
    WITH run AS (
      UPDATE ${n.runs} SET status = 'pending', error = NULL, output = NULL, finished_at = NULL,
                           cancel_requested_at = NULL, cancel_reason = NULL
       WHERE id = ${runId}::uuid AND kind = 'activity' AND status IN ('failed', 'cancelled')
      RETURNING id, queue),
    reset AS (
      UPDATE ${n.steps} s SET status = 'scheduled', attempt = 0, error = NULL, next_run_at = ${n.now},
                              finished_at = NULL, cancel_requested_at = NULL, lease_expires_at = NULL
        FROM run WHERE s.run_id = run.id AND s.status IN ('failed', 'cancelled')
      RETURNING s.id, s.run_id, s.epoch, s.fencing_token, s.queue),
    -- The unique "one terminal event per step/run" index then admits the retry's outcome; the earlier terminal
    -- events stay in the history, no longer flagged as the current outcome.
    unflagged AS (
      UPDATE ${n.events} e SET terminal = false
        FROM run WHERE e.run_id = run.id AND e.terminal
      RETURNING 1),
    ev AS (
      INSERT INTO ${n.events} (run_id, step_id, type, epoch, fencing_token, at)
      SELECT run_id, id, 'step:retry-requested', epoch, fencing_token, ${n.now} FROM reset
      RETURNING 1),
    notified AS (SELECT pg_notify(${n.channel}, 'step:' || queue) FROM reset)
    SELECT (SELECT count(*) FROM run)::int AS retried,
           (SELECT count(*) FROM ev) + (SELECT count(*) FROM notified) + (SELECT count(*) FROM unflagged) AS effects`);
  return (rows[0]?.retried ?? 0) > 0;
}
