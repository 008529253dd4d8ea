import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import { outcomesAt, type TurnCommitPlan } from './plan.js';

/**
 * The outcomes the turn delivered (`marked`): each gets its delivery order; timers and signal waits the turn saw
 * end are completed (with the signal they took, or as timed out), and a fused step's completion is written with its
 * delivery in one UPDATE (its attempt's end is read off the step: migration 0029). Writes only steps `stepLockCtes` locked; then the
 * `timer:fired` / `signal:timed-out` events (`fired_events`).
 */
export function deliveryCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { fused, runId, signalsTaken, fusedStepId } = plan;
  return sql`
    marked AS (
      UPDATE ${n.steps} s
         SET delivered_seq = dl.delivered_seq,
             status = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = ${fusedStepId}::uuid THEN 'completed'
                           ELSE s.status END,
             finished_at = CASE WHEN s.id = ${fusedStepId}::uuid OR dl.fires_timer OR dl.signal_id IS NOT NULL
                                THEN ${outcomesAt(plan)}
                                ELSE s.finished_at END,
             next_run_at = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = ${fusedStepId}::uuid THEN NULL
                                ELSE s.next_run_at END,
             -- A signal wait's outcome: the signal it took, or its timeout; a fused step's, its completion's.
             output = CASE ${
               fused
                 ? sql`WHEN s.id = ${fused.completion.stepId}::uuid
                             THEN ${JSON.stringify(fused.completion.output ?? null)}::jsonb
                           `
                 : sql``
             }${
               signalsTaken
                 ? sql`WHEN dl.signal_id IS NOT NULL
                             THEN (SELECT jsonb_build_object('signalId', g.id::text, 'payload', g.payload) FROM taken g
                                    WHERE g.id = dl.signal_id)
                           `
                 : sql``
             }WHEN dl.fires_timer AND s.kind = 'signal' THEN '{"timedOut": true}'::jsonb
                           ELSE s.output END${
                             fused
                               ? sql`,
             -- The rest of a fused step's completion (the fence checked it holds the step), as completeSteps
             -- writes it.
             error = CASE WHEN s.id = ${fused.completion.stepId}::uuid THEN NULL ELSE s.error END,
             ended_nonce = CASE WHEN s.id = ${fused.completion.stepId}::uuid THEN s.nonce ELSE s.ended_nonce END`
                               : sql``
                           }
        FROM dl
       WHERE s.id = dl.id AND s.run_id = ${runId}::uuid AND EXISTS (SELECT 1 FROM go)
      RETURNING s.id, s.seq, s.kind, dl.fires_timer, dl.signal_id, s.fencing_token),
${
  plan.firesTimers
    ? sql`
    fired_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, id, CASE WHEN kind = 'signal' THEN 'signal:timed-out' ELSE 'timer:fired' END,
             jsonb_build_object('seq', seq), true, (SELECT t FROM clock)
        FROM marked WHERE fires_timer
      RETURNING 1),`
    : sql``
}`;
}
