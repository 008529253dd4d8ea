import { sql, type SQL } from 'drizzle-orm';
import type { EndedRun } from '../../db/notification-hub.js';
import type { ClaimedStepRow } from '../claim-steps.js';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';

/** The one row of the turn commit's statement. */
export interface TurnStatementRow {
  /** Claimed: the turn's fence held. Fused: the statement applied. */
  fenced: boolean;
  conflict: boolean | null;
  eager_steps: ClaimedStepRow[] | null;
  ended: EndedRun | null;
  turn: { epoch: number; attempt: number; token: string } | null;
  /** Child runs, started with cancellation 'cascade', whose steps the run's end cancelled (only when it ended). */
  cascade_children?: string[] | null;
}

/**
 * The statement's one row ({@link TurnStatementRow}): whether the fence held (a fused step: whether it applied),
 * the conflict, the run's end as stored, the children to cascade to, and the activities granted eagerly.
 */
export function resultSelect(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { fused, runId, ending } = plan;
  return sql`
    SELECT ${fused ? sql`EXISTS (SELECT 1 FROM go)` : sql`EXISTS (SELECT 1 FROM fence)`} AS fenced,
           (SELECT conflict FROM gate) AS conflict,
           ${
             fused
               ? sql`(SELECT jsonb_build_object('epoch', turn_epoch, 'attempt', turn_attempt, 'token', turn_token::text)
              FROM run_row) AS turn,`
               : sql``
           }
           (SELECT count(*) FROM notified) AS notified,${
             ending
               ? sql`
           (SELECT jsonb_agg(id::text) FROM cascaded) AS cascade_children,`
               : sql``
           }
           (SELECT jsonb_build_object('status', status, 'output', output, 'error', error, 'cancel_reason', cancel_reason)
              FROM run_row WHERE ${ending}) AS ended,
           (SELECT jsonb_agg(jsonb_build_object(
              'id', e.id::text, 'run_id', ${runId}::text, 'seq', e.seq, 'name', e.name, 'queue', e.queue,
              'input', e.input, 'attempt', e.attempt, 'epoch', e.epoch, 'token', e.fencing_token::text,
              'nonce', e.nonce::text, 'lease_ms', p.lease_ms, 'start_to_close_timeout_ms', p.start_to_close_timeout_ms,
              'retry_policy', p.retry_policy, 'heartbeat_details', NULL,
              'remaining_ms', (extract(epoch FROM (e.lease_expires_at - ${n.now})) * 1000)::float8,
              'prev_token', NULL, 'fencing_scope', e.fencing_scope, 'next_due_ms', NULL) ORDER BY e.seq)
              FROM inserted e JOIN planned p ON p.seq = e.seq
             WHERE e.kind = 'activity' AND e.status = 'running') AS eager_steps`;
}
