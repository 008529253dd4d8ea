import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * Request cancellation of a run, in one transaction: lock the run row (`FOR NO KEY UPDATE`) and then its live
 * steps by id — the one lock order of invariant 14, so a cancel never deadlocks with a completion, a rejection or
 * a turn, and, since claims skip locked rows, no claim can slip in between what this reads and what it writes
 * (a claim that committed first is seen as running and flagged). Then mark the run and its running
 * steps `cancel_requested_at` (their owners learn at their next heartbeat and record `cancelled`, fenced), end
 * its scheduled steps `cancelled` at once, and — for a standalone run left with no running step — end the run
 * `cancelled` with its terminal event and a NOTIFY. A workflow run is woken so its next turn sees the cancel.
 * @returns the run's status after the request, or undefined when no such run exists.
 */
export async function requestCancel(
  db: Database,
  n: SchemaNames,
  p: { runId: string; reason: string },
): Promise<string | undefined> {
  // Not a run id at all: no such run (as in readRun), rather than a uuid cast error from the database.
  if (!/^[0-9a-f-]{36}$/i.test(p.runId)) return undefined;
  return db.transaction(async (tx) => {
    const runs = await tx.rows<{ kind: string; status: string; queue: string }>(sql`
      WITH run AS MATERIALIZED (
        SELECT id, kind, status, queue FROM ${n.runs} WHERE id = ${p.runId}::uuid FOR NO KEY UPDATE),
      live AS (
        SELECT count(*) AS n FROM (
          SELECT s.id FROM ${n.steps} s
           WHERE s.run_id IN (SELECT id FROM run) AND s.status IN ('scheduled', 'running')
           ORDER BY s.id FOR NO KEY UPDATE OF s) x)
      SELECT kind, status, queue, (SELECT n FROM live) AS live FROM run`);
    const run = runs[0];
    if (!run) return undefined;
    if (!['pending', 'running'].includes(run.status)) return run.status;
    const error = JSON.stringify({
      type: 'CancelledFailure',
      message: `cancelled: ${p.reason}`,
      nonRetryable: true,
    });
    const rows = await tx.rows<{ running: number }>(sql`
      WITH marked AS (
        UPDATE ${n.runs} SET cancel_requested_at = coalesce(cancel_requested_at, ${n.now}),
                             cancel_reason = coalesce(cancel_reason, ${p.reason}),
                             turn_next_run_at = CASE WHEN kind = 'workflow' THEN ${n.now} ELSE turn_next_run_at END,
                             wake_count = wake_count + 1
         WHERE id = ${p.runId}::uuid RETURNING id),
      dropped AS (
        UPDATE ${n.steps} SET status = 'cancelled', cancel_requested_at = ${n.now}, finished_at = ${n.now},
                              next_run_at = NULL, error = ${error}::jsonb
         WHERE run_id = ${p.runId}::uuid AND status = 'scheduled'
        RETURNING id, run_id, attempt, epoch, fencing_token),
      dropped_events AS (
        INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, data, terminal, at)
        SELECT run_id, id, 'step:cancelled', attempt, epoch, fencing_token,
               jsonb_build_object('reason', ${p.reason}::text), true, ${n.now} FROM dropped
        RETURNING 1),
      flagged AS (
        UPDATE ${n.steps} SET cancel_requested_at = coalesce(cancel_requested_at, ${n.now})
         WHERE run_id = ${p.runId}::uuid AND status = 'running'
        RETURNING id),
      requested_event AS (
        INSERT INTO ${n.events} (run_id, type, data, at)
        SELECT id, 'run:cancel-requested', jsonb_build_object('reason', ${p.reason}::text), ${n.now} FROM marked
        RETURNING 1)
      SELECT (SELECT count(*) FROM flagged)::int AS running,
             (SELECT count(*) FROM dropped_events) + (SELECT count(*) FROM requested_event) AS effects`);
    if (run.kind === 'activity' && (rows[0]?.running ?? 0) === 0) {
      await tx.rows(sql`
        WITH ended AS (
          UPDATE ${n.runs} SET status = 'cancelled', finished_at = ${n.now}, error = ${error}::jsonb
           WHERE id = ${p.runId}::uuid RETURNING id),
        ev AS (INSERT INTO ${n.events} (run_id, type, data, terminal, at)
               SELECT id, 'run:cancelled', jsonb_build_object('reason', ${p.reason}::text), true, ${n.now} FROM ended
               RETURNING 1)
        SELECT pg_notify(${n.channel}, 'run:' || id::text), (SELECT count(*) FROM ev) FROM ended`);
      return 'cancelled';
    }
    if (run.kind === 'workflow') await tx.rows(sql`SELECT pg_notify(${n.channel}, ${'turn:' + run.queue})`);
    return run.status;
  });
}
