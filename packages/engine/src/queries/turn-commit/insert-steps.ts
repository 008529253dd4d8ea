import { sql, type SQL } from 'drizzle-orm';
import { flowKeysInserted, stepRateKey, stepSlotKey } from '../flow-control.js';
import { policiesInserted } from '../policies.js';
import { msInterval, type SchemaNames } from '../schema-names.js';
import { outcomesAt, type TurnCommitPlan } from './plan.js';
import { liveStepStatuses } from '../status-sql.js';

/**
 * The insert of the new steps (`inserted`): activities due now (or granted eagerly), timers due by the DB clock,
 * recorded values completed, steps the turn recorded cancelled, and, when the run ends, its other new steps
 * cancelled with it; and before it their option sets that are new (`policies_made`, {@link policiesInserted}).
 * Locks only the rows it inserts (and waits only on a concurrent first insert of one of its option sets).
 */
export function insertedStepCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, signalsTaken, dispatch } = plan;
  return sql`${policiesInserted(
    n,
    'policies_made',
    sql`SELECT retry_policy, lease_ms, start_to_close_timeout_ms FROM planned`,
  )}
    inserted AS (
      INSERT INTO ${n.steps} (run_id, seq, kind, name, fencing_scope, epoch, after_delivered_seq, status,
                              delivered_seq, error, input, output, queue, priority, policy_id, max_attempts,
                              next_run_at, finished_at, cancel_requested_at, created_at,
                              attempt, fencing_token, nonce, worker_id, attempt_deadline_at, lease_expires_at,
                              reclaim_delay_ms, started_at, claimed_at, granted_until, concurrency_key,
                              concurrency_limit, rate_key, rate_limit, rate_period_ms)
      SELECT ${runId}::uuid, p.seq, p.kind, p.name,
             coalesce(p.prev_scope, ${'run:' + runId + '/seq:'} || p.seq::text),
             coalesce(p.prev_epoch, 0) + CASE WHEN p.eager THEN 1 ELSE 0 END,
             p.after_delivered_seq,
             CASE WHEN p.eager THEN 'running' WHEN p.ends_with_run THEN 'cancelled'
                  WHEN p.key_taken_by IS NOT NULL THEN 'failed' WHEN p.reused_completed THEN 'completed'
                  ELSE p.status END,
             p.delivered_seq,
             CASE WHEN p.key_taken_by IS NOT NULL
                  THEN jsonb_build_object(
                         'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', p.key_taken_by,
                         'message', 'child workflow ' || p.name || ' was not started: run ' || p.key_taken_by
                                    || ' of that workflow has its key ' || (p.input->>'key'),
                         'cause', jsonb_build_object(
                           'type', 'RunKeyConflict', 'nonRetryable', true,
                           'message', 'run ' || p.key_taken_by || ' has key ' || (p.input->>'key')))
                  ELSE p.error END,
             -- A child step records the run it waits for: its own earlier child when it takes that one again.
             CASE WHEN p.reused_run_id IS NOT NULL AND NOT p.ends_with_run
                  THEN jsonb_set(p.input, '{runId}', to_jsonb(p.reused_run_id::text)) ELSE p.input END,
             ${
               signalsTaken
                 ? sql`CASE WHEN p.signal_id IS NOT NULL
                  THEN (SELECT jsonb_build_object('signalId', g.id::text, 'payload', g.payload) FROM taken g
                         WHERE g.id = p.signal_id)
                  WHEN p.reused_completed AND NOT p.ends_with_run THEN p.reused_output
                  ELSE p.output END`
                 : sql`CASE WHEN p.reused_completed AND NOT p.ends_with_run THEN p.reused_output ELSE p.output END`
             },
             coalesce(p.queue, (SELECT queue FROM go)), p.priority,
             p.policy_id, p.max_attempts,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ${msInterval(sql`least(p.lease_ms, p.start_to_close_timeout_ms) + p.first_reclaim_delay_ms`)}
                  WHEN p.status <> 'scheduled' OR p.ends_with_run THEN NULL
                  ELSE greatest(CASE WHEN p.due_at_ms IS NOT NULL THEN to_timestamp(p.due_at_ms / 1000.0)
                                     WHEN p.delay_ms IS NOT NULL THEN (SELECT t FROM clock) + ${msInterval(sql`p.delay_ms`)} END,
                                p.held_until) END,
             CASE WHEN p.delivered_seq IS NOT NULL AND NOT p.ends_with_run AND p.key_taken_by IS NULL THEN ${outcomesAt(plan)}
                  WHEN p.status NOT IN ${liveStepStatuses} OR p.ends_with_run OR p.key_taken_by IS NOT NULL
                       OR p.reused_completed
                  THEN (SELECT t FROM clock) END,
             CASE WHEN p.ends_with_run THEN (SELECT t FROM clock) END,
             (SELECT t FROM clock),
             CASE WHEN p.eager THEN 1 ELSE 0 END,
             CASE WHEN p.eager THEN ${n.nextToken} END,
             CASE WHEN p.eager THEN gen_random_uuid() END,
             CASE WHEN p.eager THEN ${dispatch.workerId} END,
             CASE WHEN p.eager THEN (SELECT t FROM clock) + ${msInterval(sql`p.start_to_close_timeout_ms`)} END,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ${msInterval(sql`least(p.lease_ms, p.start_to_close_timeout_ms)`)} END,
             CASE WHEN p.eager THEN p.first_reclaim_delay_ms ELSE 0 END,
             CASE WHEN p.eager THEN (SELECT t FROM clock) END,
             -- An eager grant's attempt, read off the step until it ends other than by its completion (migration
             -- 0029): claimed now, with the lease above.
             CASE WHEN p.eager THEN (SELECT t FROM clock) END,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ${msInterval(sql`least(p.lease_ms, p.start_to_close_timeout_ms)`)} END,
             p.concurrency_key, p.concurrency_limit, p.rate_key, p.rate_limit, p.rate_period_ms
        FROM planned p
      RETURNING id, seq, kind, name, status, queue, priority, error, next_run_at, input, attempt, epoch, fencing_token, nonce,
                lease_expires_at, fencing_scope, started_at,
                -- Cancelled with the run (a step the code saw cancelled carries its stored error).
                status = 'cancelled' AND error IS NULL AS ended_with_run),`;
}

/**
 * What follows the insert of the new steps (an eagerly granted one's attempt is read off its row: migration 0029):
 * the flow-control keys they name (`flow_keys_kept`, `flow_keys_made`: the existing keys `FOR KEY SHARE` in key
 * order, after the run's rows, so a retention sweep cannot delete a key a step is inserted under; flow-control.ts),
 * and their `*:started` / `step:scheduled` events, those the `run_events` view cannot read off the row.
 */
export function scheduledStepCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, flowKeyed, schedules } = plan;
  if (!schedules) return sql``;
  return sql`
${
  flowKeyed
    ? flowKeysInserted(
        n,
        sql`SELECT ${stepSlotKey(sql`x`)} FROM ns x WHERE x.concurrency_key IS NOT NULL AND EXISTS (SELECT 1 FROM go)
                  UNION ALL
                  SELECT ${stepRateKey(sql`x`)} FROM ns x WHERE x.rate_key IS NOT NULL AND EXISTS (SELECT 1 FROM go)`,
      )
    : sql``
}
    scheduled_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, at)
      SELECT ${runId}::uuid, id,
             CASE kind WHEN 'timer' THEN 'timer:started' WHEN 'signal' THEN 'signal:waiting'
                       WHEN 'child' THEN 'child:started' ELSE 'step:scheduled' END,
             CASE WHEN kind = 'child' THEN jsonb_build_object('name', name, 'seq', seq, 'childRunId', input->>'runId')
                  -- When it is due: a step granted at once is due now (its next_run_at is when the grant's lease
                  -- lets it be reclaimed: that is its attempt:claimed event's leaseExpiresAt, not a due time).
                  ELSE jsonb_build_object('name', name, 'seq', seq,
                                          'dueAt', CASE WHEN status = 'running' THEN started_at ELSE next_run_at END) END,
             (SELECT t FROM clock)
        FROM inserted
       -- An activity due at once (granted now, or due at its insert) has its step:scheduled read off its row by the
       -- run_events view; one due later, or inserted ended, stores it.
       WHERE kind IN ('timer', 'signal') OR (kind = 'child' AND status = 'running')
          OR (kind = 'activity'
              AND CASE WHEN status = 'running' THEN started_at ELSE next_run_at END
                  IS DISTINCT FROM (SELECT t FROM clock))
      RETURNING 1),`;
}

/**
 * The `step:cancelled` events of the new steps inserted cancelled (`cancelled_events`). Takes no lock.
 */
export function cancelledStepEventCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, insertsCancelled } = plan;
  if (!insertsCancelled) return sql``;
  return sql`
    cancelled_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, id, 'step:cancelled',
             CASE WHEN ended_with_run THEN jsonb_build_object('reason', 'the run ended', 'whileRunning', false)
                  ELSE jsonb_build_object('reason', 'the run was cancelled before this step could start') END,
             true, (SELECT t FROM clock)
        FROM inserted WHERE status = 'cancelled'
      RETURNING 1),`;
}
