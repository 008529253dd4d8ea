import { sql, type SQL } from 'drizzle-orm';
import { grantColumns, recordEndedGrants } from '../ended-grants.js';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';
import { liveRunStatuses, liveStepStatuses } from '../status-sql.js';

/**
 * Every live step ends with the run, running ones included (`leftover`, locked by `stepLockCtes`; their holders
 * are refused as `cancelled` at their next write), their open attempts end (`leftover_attempts`), and their events.
 */
export function leftoverStepCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, ending } = plan;
  if (!ending) return sql``;
  return sql`
    -- Every live step ends with the run, running ones included (invariant 12: the holder's next write is
    -- refused as "cancelled" and its signal fires), each from its newest version (locked above).
    leftover AS (
      UPDATE ${n.steps} s SET status = 'cancelled', finished_at = (SELECT t FROM clock), next_run_at = NULL,
                              cancel_requested_at = coalesce(s.cancel_requested_at, (SELECT t FROM clock))
        FROM locked l
       WHERE ${ending} AND s.id = l.id AND l.status IN ${liveStepStatuses} AND EXISTS (SELECT 1 FROM go)
         AND NOT EXISTS (SELECT 1 FROM dl WHERE dl.id = l.id)
      RETURNING ${grantColumns('s')}, l.status AS prev_status, s.kind,
                s.input->>'runId' AS child_run_id, s.input->>'cancellation' AS cancellation),
    ${recordEndedGrants(n, {
      name: 'leftover_attempts',
      from: sql`leftover`,
      outcome: sql`'cancelled'`,
      endedAt: sql`(SELECT t FROM clock)`,
      where: sql`g.prev_status = 'running'`,
      onlyOpen: true,
    })},
    leftover_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, data, terminal, at)
      SELECT ${runId}::uuid, id, 'step:cancelled', attempt, epoch, fencing_token,
             jsonb_build_object('reason', 'the run ended', 'whileRunning', prev_status = 'running'), true,
             (SELECT t FROM clock)
        FROM leftover
      RETURNING 1),`;
}

/**
 * When the run ends: its parent's child step completes or fails and the parent wakes (`parent_step`,
 * `parent_woken`; the parent's run row was locked first, by `runLockCtes`), and its children still running under
 * `cancellation: 'cascade'` are marked cancelled and woken (`cascaded`: their run rows locked by the UPDATE, after
 * this run's — an ancestor before its descendants).
 */
export function parentAndChildCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, ending, status, output, error } = plan;
  return sql`
${
  ending
    ? sql`
    -- The end of a child run completes its parent's step (still running: a cancel of the parent ended it already)
    -- with its output, or fails it with a ChildWorkflowFailure carrying its failure, and wakes the parent.
    parent_step AS (
      UPDATE ${n.steps} s
         SET status = CASE WHEN ${status}::text = 'completed' THEN 'completed' ELSE 'failed' END,
             output = CASE WHEN ${status}::text = 'completed' THEN ${output}::jsonb END,
             error = CASE WHEN ${status}::text = 'completed' THEN NULL
                          ELSE jsonb_build_object(
                                 'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', ${runId}::text,
                                 'message', 'child workflow run ' || ${runId}::text || ' ' || ${status}::text,
                                 'cause', ${error}::jsonb) END,
             finished_at = (SELECT t FROM clock)
        FROM run_row r
       WHERE s.id = r.parent_step_id AND s.kind = 'child' AND s.status = 'running' AND s.retired_at IS NULL
      RETURNING s.id, s.run_id, s.seq, s.status, s.error),
    parent_step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT run_id, id, 'step:' || status,
             jsonb_build_object('childRunId', ${runId}::text) || CASE WHEN error IS NOT NULL
                                                                    THEN jsonb_build_object('error', error)
                                                                    ELSE '{}'::jsonb END,
             true, (SELECT t FROM clock)
        FROM parent_step
      RETURNING 1),
    -- Children still running that the end cancels (cancellation 'cascade'): marked here, durably, and woken — a
    -- parent's run row and steps are locked before its children's. cascadeToChildren then ends their live steps
    -- after the commit, as a cancel does; a child whose process died before that still sees the cancel at its next
    -- step.
    cascaded AS (
      UPDATE ${n.runs} c
         SET cancel_requested_at = coalesce(c.cancel_requested_at, (SELECT t FROM clock)),
             cancel_reason = coalesce(c.cancel_reason, 'its parent run ended with it running'),
             turn_next_run_at = (SELECT t FROM clock), wake_count = c.wake_count + 1
        FROM leftover l
       WHERE l.kind = 'child' AND l.cancellation = 'cascade' AND c.id = (l.child_run_id)::uuid
         AND c.status IN ${liveRunStatuses}
      RETURNING c.id, c.queue),
    cascaded_events AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT id, 'run:cancel-requested', jsonb_build_object('reason', 'its parent run ended with it running'),
             (SELECT t FROM clock)
        FROM cascaded
      RETURNING 1),
    parent_woken AS (
      UPDATE ${n.runs} p
         SET turn_next_run_at = least(coalesce(p.turn_next_run_at, (SELECT t FROM clock)), (SELECT t FROM clock)),
             wake_count = p.wake_count + 1
       WHERE p.id = (SELECT run_id FROM parent_step) AND p.status IN ${liveRunStatuses}
      RETURNING p.queue),`
    : sql``
}`;
}

/**
 * The run's terminal event when it ends failed or cancelled (`run_event`; a completed run's `run:completed` is read
 * off its row by the `run_events` view). Takes no lock.
 */
export function runEndEventCte(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { ending, status, error } = plan;
  if (!ending || status === 'completed') return sql``;
  return sql`
    run_event AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT id, 'run:' || ${status}::text,
             CASE WHEN ${error}::jsonb IS NOT NULL THEN jsonb_build_object('error', ${error}::jsonb) END,
             true, (SELECT t FROM clock)
        FROM run_row WHERE ${ending} AND ${status}::text <> 'completed'
      RETURNING 1),`;
}
