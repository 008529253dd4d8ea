import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';
import { unsuccessfulStatuses } from '../status-sql.js';

/**
 * With a child started under a key: the runs holding its key (`key_holders`), the parent's own earlier children
 * among them locked (`own_locked`: `FOR NO KEY UPDATE`, by id, after the parent's own rows — an ancestor before its
 * descendants), and what each decides (`child_keys`).
 */
export function childKeyCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, childKeys } = plan;
  return sql`
    ${
      childKeys
        ? sql`-- A child whose key names an existing run of its workflow. The run this very parent started at this very
    -- position (its step there retired by a retry of the parent, and the code, replayed, starts the child again) is
    -- its own earlier child, as a Temporal reset re-runs it: one that failed or was cancelled gives its key to a
    -- new child run (Temporal's default workflow-id reuse: a closed run's id may start anew), kept itself as a run
    -- of the parent's history; one still pending or running becomes the child of the new step (its end completes
    -- it); one that completed completes the new step with its output at once. Any other run keeps its key and the
    -- child is not started: its step fails (the code sees a ChildWorkflowFailure naming that run at its next turn).
    key_holders AS MATERIALIZED (
      SELECT x.seq, r.id AS run_id,
             r.parent_run_id = ${runId}::uuid
               AND EXISTS (SELECT 1 FROM ${n.steps} o
                            WHERE o.id = r.parent_step_id AND o.run_id = ${runId}::uuid AND o.seq = x.seq
                              AND o.retired_at IS NOT NULL) AS own
        FROM ns x
        JOIN ${n.runs} r ON r.kind = 'workflow' AND r.name = x.name AND r.idempotency_key = x.input->>'key'
       WHERE x.kind = 'child' AND x.status = 'running'),
    -- Its own children locked (after the parent's rows: an ancestor before its descendants), each as its newest
    -- version: one that ended while this statement waited for the parent's lock is seen ended.
    own_locked AS MATERIALIZED (
      SELECT r.id, r.status, r.output FROM ${n.runs} r
       WHERE r.id IN (SELECT run_id FROM key_holders WHERE own)
       ORDER BY r.id FOR NO KEY UPDATE OF r),
    child_keys AS MATERIALIZED (
      SELECT h.seq, h.run_id, h.own, l.status, l.output
        FROM key_holders h LEFT JOIN own_locked l ON l.id = h.run_id
       -- An own child pruned meanwhile holds no key any more.
       WHERE NOT h.own OR l.id IS NOT NULL),`
        : sql``
    }`;
}

/**
 * The child runs the turn starts: the parent's own earlier children at those positions let go of their key or
 * are adopted (`own_children`, rows locked by `childKeyCtes` already), the new runs inserted pending with their
 * first turn due now (`children`; each child's `run:started` is read off its row by the `run_events` view), and the
 * events of the children not started (`child_refused_events`). Locks only the rows it inserts (and those already
 * locked).
 */
export function childRunCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, startsChildren, childKeys } = plan;
  return sql`${
    startsChildren
      ? sql`
    -- The child runs this turn starts, pending with their first turn due now, their parent recorded; a child whose
    -- key was taken fails its step instead.
${
  childKeys
    ? sql`    -- The parent's own earlier children at the positions it starts again (see child_keys), locked after the
    -- parent's rows (an ancestor before its descendants): one that failed or was cancelled lets go of its key for
    -- the new child run; one still pending or running is now the new step's child. Before the inserts below.
    own_children AS (
      UPDATE ${n.runs} c
         SET idempotency_key = CASE WHEN c.status IN ${unsuccessfulStatuses} THEN NULL ELSE c.idempotency_key END,
             parent_step_id = CASE WHEN c.status IN ${unsuccessfulStatuses} THEN c.parent_step_id ELSE i.id END
        FROM child_keys k JOIN inserted i ON i.seq = k.seq AND i.kind = 'child' AND i.status = 'running'
       WHERE c.id = k.run_id AND k.own AND c.status <> 'completed'
      RETURNING c.id, c.status),
`
    : sql``
}    children AS (
      INSERT INTO ${n.runs} (id, kind, name, status, input, idempotency_key, queue, priority, turn_next_run_at,
                             created_at, parent_run_id, parent_step_id)
      SELECT (i.input->>'runId')::uuid, 'workflow', i.name, 'pending', i.input->'input', i.input->>'key', i.queue,
             i.priority, (SELECT t FROM clock), (SELECT t FROM clock), ${runId}::uuid, i.id
        FROM inserted i WHERE i.kind = 'child' AND i.status = 'running'${
          childKeys
            ? sql`
         AND (SELECT count(*) FROM own_children) >= 0
         AND NOT EXISTS (SELECT 1 FROM own_children o
                          WHERE o.id = (i.input->>'runId')::uuid AND o.status NOT IN ${unsuccessfulStatuses})`
            : sql``
        }
      RETURNING id, name, queue),
    child_refused_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, id, 'step:' || status,
             CASE WHEN status = 'failed' THEN jsonb_build_object('error', error)
                  ELSE jsonb_build_object('childRunId', input->>'runId') END,
             true, (SELECT t FROM clock)
        FROM inserted WHERE kind = 'child' AND status IN ('failed', 'completed')
      RETURNING 1),`
      : sql``
  }`;
}
