import type { NewStep } from '../../turn/contract.js';

/** Stored error of a step a turn recorded cancelled (see `commitTurn`, 2). */
const CANCELLED_UNSEEN = {
  type: 'CancelledFailure',
  message: 'cancelled: the run was cancelled before this step could start',
  nonRetryable: true,
};

/** A new step as the commit's `ns` CTE reads it (`jsonb_to_recordset`): snake_case columns, in its column order. */
export type NewStepRow = ReturnType<typeof newStepRow>;

/**
 * The row a turn's new step is inserted from: its status (a recorded value, or a signal wait that took a signal
 * at once, is completed; a step the turn recorded cancelled is cancelled; a child runs from its start; others are
 * scheduled), and the columns of its kind, null or zero for the others.
 */
export function newStepRow(s: NewStep) {
  return {
    seq: s.seq,
    kind: s.kind,
    name: s.name,
    after_delivered_seq: s.afterDeliveredSeq,
    // A child step runs from its start: no worker claims it; the child run's end completes it.
    status:
      s.kind === 'value' || (s.kind === 'signal' && s.signalId !== undefined)
        ? 'completed'
        : s.cancelled
          ? 'cancelled'
          : s.kind === 'child'
            ? 'running'
            : 'scheduled',
    delivered_seq: s.kind === 'value' ? null : (s.deliveredSeq ?? null),
    error: s.kind !== 'value' && s.cancelled ? CANCELLED_UNSEEN : null,
    // A signal wait keeps its timeout, so that a retry that schedules it again can give it its full length.
    // A child step records its child run's id, input, key and cancellation policy.
    input:
      s.kind === 'activity'
        ? s.input
        : s.kind === 'signal' && s.timeoutMs !== undefined
          ? { timeoutMs: s.timeoutMs }
          : s.kind === 'child'
            ? { runId: s.childRunId, input: s.input, key: s.key, cancellation: s.cancellation }
            : null,
    output: s.kind === 'value' ? s.output : null,
    queue: s.kind === 'activity' || s.kind === 'child' ? s.queue : null,
    priority: s.kind === 'activity' || s.kind === 'child' ? s.priority : 0,
    retry_policy: s.kind === 'activity' ? s.retryPolicy : {},
    lease_ms: s.kind === 'activity' ? s.leaseMs : 0,
    start_to_close_timeout_ms: s.kind === 'activity' ? s.startToCloseTimeoutMs : 0,
    delay_ms:
      s.kind === 'timer'
        ? (s.delayMs ?? null)
        : s.kind === 'activity'
          ? 0
          : s.kind === 'signal'
            ? (s.timeoutMs ?? null)
            : null,
    due_at_ms: s.kind === 'timer' ? (s.dueAtMs ?? null) : null,
    signal_id: s.kind === 'signal' ? (s.signalId ?? null) : null,
    concurrency_key: (s.kind === 'activity' && s.concurrency?.key) || null,
    concurrency_limit: (s.kind === 'activity' && s.concurrency?.limit) || null,
    rate_key: s.kind === 'activity' && s.rateLimit ? s.rateLimit.key : null,
    rate_limit: (s.kind === 'activity' && s.rateLimit?.limit) || null,
    rate_period_ms: (s.kind === 'activity' && s.rateLimit?.periodMs) || null,
  };
}
