import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';
import { maxAttemptsOf } from '../policies.js';
import { unsuccessfulStatuses } from '../status-sql.js';
import { jsonRowsLimit } from '../row-estimates.js';

/**
 * The turn's new steps as rows (`ns`), the retired rows at their positions (`prev`: a position a retry retired is
 * the same unit of work, invariant 13), and the new activities granted to this worker at once (`eager_sel`, eager
 * dispatch). Takes no lock (reads only).
 */
export function newStepInputCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, ending, steps, dispatch } = plan;
  return sql`
    ns AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(steps)}::jsonb) AS x(
        seq int, kind text, name text, after_delivered_seq int, status text, delivered_seq int, error jsonb, input jsonb, output jsonb,
        queue text, priority int, retry_policy jsonb, lease_ms int, start_to_close_timeout_ms int,
        delay_ms float8, due_at_ms float8, signal_id bigint, concurrency_key text, concurrency_limit int,
        rate_key text, rate_limit int, rate_period_ms int)${jsonRowsLimit(steps.length)}),
    -- A position a retry retired and the code now schedules again is the same unit of work (invariant 13):
    -- the new row takes the retired rows' fencing scope and highest epoch, and is not due before the lease of
    -- an attempt that may still hold one of them (ended by the retirement, not by itself) runs out.
    prev AS (
      SELECT p.seq, (array_agg(p.fencing_scope ORDER BY p.created_at))[1] AS fencing_scope, max(p.epoch) AS epoch,
             max(p.lease_expires_at) FILTER (WHERE p.ended_nonce IS DISTINCT FROM p.nonce) AS held_until
        FROM ${n.steps} p
       WHERE p.run_id = ${runId}::uuid AND p.retired_at IS NOT NULL AND p.seq IN (SELECT seq FROM ns)
       GROUP BY p.seq),
    -- Eager dispatch: the new activities this worker serves, as many as it has slots for, are granted to it
    -- here, as a claim grants (claimSteps): attempt 1, epoch + 1, a fresh token from the global sequence, a
    -- fresh nonce, a lease from the database clock capped by the attempt deadline, an attempts row. Not a
    -- position whose retired predecessor may still be held (it is not due before that lease ends), and nothing
    -- when the turn ends the run.
    eager_sel AS MATERIALIZED (
      SELECT ns.seq FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE NOT ${ending} AND ns.kind = 'activity' AND ns.status = 'scheduled'
         AND ns.name IN (SELECT jsonb_array_elements_text(${JSON.stringify(dispatch.activityNames)}::jsonb))
         AND ns.queue IN (SELECT jsonb_array_elements_text(${JSON.stringify(dispatch.queues)}::jsonb))
         AND (prev.held_until IS NULL OR prev.held_until <= (SELECT t FROM clock))
         -- Not a step under a concurrency key or a rate limit: only a claim admits those (flow-control.ts).
         AND ns.concurrency_key IS NULL AND ns.rate_key IS NULL
       ORDER BY ns.seq
       LIMIT ${dispatch.limit}),`;
}

/**
 * Each new step with what decides how it is inserted (`planned`): its retired predecessor, eager dispatch, a
 * child key taken by another run or its own earlier child reused, whether it ends with the run, its first reclaim
 * delay, its policy's key and attempts budget. Takes no lock; waits for `go` (and a fused step's `turn_grant`).
 */
export function plannedStepCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { fused, ending, childKeys } = plan;
  return sql`
    planned AS (
      SELECT ns.*, prev.fencing_scope AS prev_scope, prev.epoch AS prev_epoch, prev.held_until,
             ns.seq IN (SELECT seq FROM eager_sel) AS eager,
             ${childKeys ? sql`(SELECT k.run_id::text FROM child_keys k WHERE k.seq = ns.seq AND NOT k.own)` : sql`NULL::text`} AS key_taken_by,
             ${
               childKeys
                 ? sql`(SELECT k.run_id FROM child_keys k
                        WHERE k.seq = ns.seq AND k.own AND k.status NOT IN ${unsuccessfulStatuses})`
                 : sql`NULL::uuid`
             } AS reused_run_id,
             ${
               childKeys
                 ? sql`(SELECT k.output FROM child_keys k WHERE k.seq = ns.seq AND k.own AND k.status = 'completed')`
                 : sql`NULL::jsonb`
             } AS reused_output,
             ${
               childKeys
                 ? sql`EXISTS (SELECT 1 FROM child_keys k WHERE k.seq = ns.seq AND k.own AND k.status = 'completed')`
                 : sql`false`
             } AS reused_completed,
             -- A step the run's end cancels with the run's other live steps (a child it would start: not started).
             ${ending} AND (ns.status = 'scheduled' OR (ns.kind = 'child' AND ns.status = 'running')) AS ends_with_run,
             CASE WHEN 1 >= ${maxAttemptsOf(sql`ns.retry_policy`)} THEN 0
                  ELSE ${n.retryDelayMs}(ns.retry_policy, 1) END AS first_reclaim_delay_ms,
             -- Its options as a policies row (inserted by policies_made when new), and its attempts budget.
             ${n.policyId}(ns.retry_policy, ns.lease_ms, ns.start_to_close_timeout_ms) AS policy_id,
             ${maxAttemptsOf(sql`ns.retry_policy`)} AS max_attempts
        FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE EXISTS (SELECT 1 FROM go)${fused ? sql` AND EXISTS (SELECT 1 FROM turn_grant)` : sql``}),`;
}
