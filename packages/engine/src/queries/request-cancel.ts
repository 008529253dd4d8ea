import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { notifyOnce } from './notify.js';
import { grantColumns, recordEndedGrants } from './ended-grants.js';
import type { SchemaNames } from './schema-names.js';
import { liveRunStatuses, liveStepStatuses } from './status-sql.js';
import { isLiveRunStatus, type RunKind, type RunStatus } from '../turn/state-machine.js';

/**
 * Cancel a run, in one transaction. First lock the run row (`FOR NO KEY UPDATE`); then, in the next statement,
 * lock its live steps by id — the one lock order of invariant 14, so a cancel never deadlocks with a completion,
 * a heartbeat, a rejection or a turn; since claims skip locked rows, no claim slips in between what that
 * statement reads and what it writes (a claim that committed first is seen as running). The same statement marks
 * the run `cancel_requested_at` and ends every live step `cancelled` at once — scheduled and running alike
 * (DESIGN.md §4: running → cancelled, the owner learns at its
 * next heartbeat). A running step's attempt row ends `cancelled`; its holder's next heartbeat, completion,
 * failure or fenced write is refused with `LeaseLostError` (reason `cancelled`) and its signal fires with reason
 * `cancelled` (invariant 12). The step keeps its lease expiry, so a retry of the run does not grant the step again
 * before that lease ends. A standalone run then ends `cancelled` with its terminal event and a NOTIFY; so does a
 * workflow run no turn has begun (see {@link endUnbegunRun}): no worker may ever serve it, and it has no code in
 * flight to clean up. Any other workflow run is woken so its next turn sees the cancel (its code may still run
 * cleanup steps).
 * @returns the run's status after the request, or undefined when no such run exists.
 */
export async function requestCancel(
  db: Database,
  n: SchemaNames,
  p: { runId: string; reason: string },
): Promise<string | undefined> {
  // Not a run id at all: no such run (as in readRun), rather than a uuid cast error from the database.
  if (!/^[0-9a-f-]{36}$/i.test(p.runId)) return undefined;
  return db.transaction((tx) => cancelInTransaction(tx, n, p));
}

/**
 * {@link requestCancel} in transaction `tx`; then, for each child step it cancelled whose child was started with
 * `cancellation: 'cascade'`, the same for that child run, in the same transaction — a parent's run row and steps
 * before its children's (an ancestor before its descendants: the order a child's end locks its parent in).
 */
export async function cancelInTransaction(
  tx: Database,
  n: SchemaNames,
  p: { runId: string; reason: string },
): Promise<string | undefined> {
  // A child run that no turn has begun ends here, and its end fails its parent's step: the parent's run row is
  // locked first (an ancestor before its descendants, the order a run's end and a cascading cancel lock them in;
  // already held when this is the cascade of the parent's cancel). Read without a lock: re-checked below.
  const [child] = await tx.rows<{ parent_run_id: string }>(sql`
    SELECT parent_run_id::text FROM ${n.runs}
     WHERE id = ${p.runId}::uuid AND kind = 'workflow' AND status = 'pending' AND started_at IS NULL
       AND parent_run_id IS NOT NULL`);
  if (child) {
    await tx.rows(sql`SELECT 1 FROM ${n.runs} WHERE id = ${child.parent_run_id}::uuid FOR NO KEY UPDATE`);
  }
  // The run row alone: a statement that waited for it reads with the snapshot it began with, so steps that the
  // holder (a turn's commit) added meanwhile would be missed here and first locked by the next statement, out
  // of order. They are locked below, by a statement that begins once the run row is held.
  const runs = await tx.rows<{ kind: RunKind; status: RunStatus; queue: string; unbegun: boolean }>(sql`
    SELECT kind, status, queue, kind = 'workflow' AND status = 'pending' AND started_at IS NULL AS unbegun
      FROM ${n.runs} WHERE id = ${p.runId}::uuid FOR NO KEY UPDATE`);
  const run = runs[0];
  if (!run) return undefined;
  if (!isLiveRunStatus(run.status)) return run.status;
  const error = JSON.stringify({
    type: 'CancelledFailure',
    message: `cancelled: ${p.reason}`,
    nonRetryable: true,
  });
  const cancelled = await tx.rows<{ cascade: string[] | null }>(sql`
    WITH marked AS (
      UPDATE ${n.runs} SET cancel_requested_at = coalesce(cancel_requested_at, ${n.now}),
                           cancel_reason = coalesce(cancel_reason, ${p.reason}),
                           turn_next_run_at = CASE WHEN kind = 'workflow' THEN ${n.now} ELSE turn_next_run_at END,
                           wake_count = wake_count + 1
       WHERE id = ${p.runId}::uuid RETURNING id),
    -- Every live step, locked by id (invariant 14) before any is changed; a lock that waited returns the
    -- version committed meanwhile, so a claim that committed first is seen as running.
    live AS MATERIALIZED (
      SELECT id, status FROM ${n.steps}
       WHERE run_id = ${p.runId}::uuid AND status IN ${liveStepStatuses} AND retired_at IS NULL
       ORDER BY id FOR NO KEY UPDATE),
    dropped AS (
      UPDATE ${n.steps} s SET status = 'cancelled', cancel_requested_at = ${n.now}, finished_at = ${n.now},
                              next_run_at = NULL, error = ${error}::jsonb
        FROM live WHERE s.id = live.id
      RETURNING ${grantColumns('s')}, live.status AS prev_status, s.kind,
                s.input->>'runId' AS child_run_id, s.input->>'cancellation' AS cancellation),
    ${recordEndedGrants(n, {
      name: 'ended_attempts',
      from: sql`dropped`,
      outcome: sql`'cancelled'`,
      endedAt: n.now,
      where: sql`g.prev_status = 'running'`,
      onlyOpen: true,
    })},
    dropped_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, data, terminal, at)
      SELECT run_id, id, 'step:cancelled', attempt, epoch, fencing_token,
             jsonb_build_object('reason', ${p.reason}::text, 'whileRunning', prev_status = 'running'), true, ${n.now}
        FROM dropped
      RETURNING 1),
    requested_event AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT id, 'run:cancel-requested', jsonb_build_object('reason', ${p.reason}::text), ${n.now} FROM marked
      RETURNING 1)
    SELECT (SELECT count(*) FROM dropped_events) + (SELECT count(*) FROM requested_event)
             + (SELECT count(*) FROM ended_attempts) AS effects,
           (SELECT jsonb_agg(child_run_id) FROM dropped WHERE kind = 'child' AND cancellation = 'cascade') AS cascade`);
  for (const childRunId of cancelled[0]?.cascade ?? []) {
    await cancelInTransaction(tx, n, {
      runId: childRunId,
      reason: `its parent run ${p.runId} was cancelled`,
    });
  }
  if (run.kind === 'activity') {
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
  // A run locked as never begun, by a lock no claim can take while this transaction holds it (claims skip it).
  if (run.unbegun) {
    await endUnbegunRun(tx, n, { runId: p.runId, reason: p.reason, error });
    return 'cancelled';
  }
  if (run.kind === 'workflow') await tx.rows(sql`SELECT pg_notify(${n.channel}, ${'turn:' + run.queue})`);
  return run.status;
}

/**
 * End `cancelled`, in this statement, workflow run `runId` that no turn has begun (`pending`, never claimed: its
 * `started_at` is unset — a run retried from its history has begun): no code of it ever ran, so there is nothing
 * its cancellation handlers could clean up, and waiting for a worker to claim it would leave it pending for ever
 * when no worker registers its workflow (a child of such a workflow, after its parent's cancel or end). As a
 * run's end does (commitTurn), it fails its parent's child step, if still running, with a ChildWorkflowFailure
 * carrying the cancel, and wakes the parent. Its run row (and its parent's, first) must be locked by the caller.
 */
async function endUnbegunRun(
  tx: Database,
  n: SchemaNames,
  p: { runId: string; reason: string; error: string },
): Promise<void> {
  await tx.rows(sql`
    WITH ended AS (
      UPDATE ${n.runs} SET status = 'cancelled', finished_at = ${n.now}, error = ${p.error}::jsonb,
                           turn_next_run_at = NULL
       WHERE id = ${p.runId}::uuid AND kind = 'workflow' AND status = 'pending' AND started_at IS NULL
      RETURNING id, parent_step_id),
    ev AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT id, 'run:cancelled', jsonb_build_object('reason', ${p.reason}::text), true, ${n.now} FROM ended
      RETURNING 1),
    -- As every run's end does (commitTurn): no signal stays pending; each one sent before the cancel (a run's row
    -- lock orders it before this end) is undelivered, the run's end its reason.
    unseen AS (
      UPDATE ${n.signals} g
         SET consumed_at = ${n.now},
             undelivered = jsonb_build_object('reason', 'run-ended', 'status', 'cancelled')
        FROM ended e
       WHERE g.run_id = e.id AND g.consumed_at IS NULL
      RETURNING g.id, g.run_id, g.name),
    unseen_events AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT run_id, 'signal:undelivered',
             jsonb_build_object('name', name, 'signalId', id::text, 'reason', 'run-ended', 'status', 'cancelled'),
             false, ${n.now}
        FROM unseen
      RETURNING 1),
    -- Its parent's step: still running unless the parent's own cancel or end has ended it.
    parent_step AS (
      UPDATE ${n.steps} s
         SET status = 'failed', finished_at = ${n.now},
             error = jsonb_build_object(
                       'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', ${p.runId}::text,
                       'message', 'child workflow run ' || ${p.runId}::text || ' cancelled',
                       'cause', ${p.error}::jsonb)
        FROM ended e
       WHERE s.id = e.parent_step_id AND s.kind = 'child' AND s.status = 'running' AND s.retired_at IS NULL
      RETURNING s.id, s.run_id, s.error),
    parent_step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT run_id, id, 'step:failed', jsonb_build_object('childRunId', ${p.runId}::text, 'error', error), true,
             ${n.now}
        FROM parent_step
      RETURNING 1),
    parent_woken AS (
      UPDATE ${n.runs} r
         SET turn_next_run_at = least(coalesce(r.turn_next_run_at, ${n.now}), ${n.now}), wake_count = r.wake_count + 1
       WHERE r.id = (SELECT run_id FROM parent_step) AND r.status IN ${liveRunStatuses}
      RETURNING r.queue),
    ${notifyOnce(
      n,
      'notified',
      sql`SELECT 'run:' || id::text FROM ended UNION ALL SELECT 'turn:' || queue FROM parent_woken`,
    )}
    SELECT (SELECT count(*) FROM ev) + (SELECT count(*) FROM parent_step_event) + (SELECT count(*) FROM notified)
             + (SELECT count(*) FROM unseen_events) AS effects`);
}
