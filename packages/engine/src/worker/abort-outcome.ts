import { CancelledFailure, serializeFailure, type AbortReason } from '@palisade/sdk';
import type { AttemptOutcomes } from './attempt-outcome.js';

/** How long a shutdown or local-expiry abort waits for the activity to stop before leaving its lease to expire (ms). */
const SHUTDOWN_SETTLE_MS = 1_000;

/**
 * What `promise` settles with, or `undefined` if `ms` pass first. The timer is cleared either way: a stopped
 * worker must leave no timer behind (a pending one also kept the attempt's closure alive for `ms`).
 */
async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * What an attempt aborted with `reason` records, once its code `user` has run or been given up on: a deadline is
 * a `timed_out` failure (retried by the policy); a cancel a final `cancelled` one; a shutdown releases the step if
 * the code stops within {@link SHUTDOWN_SETTLE_MS} (else its lease expires); a local expiry reports what the code
 * did, for the database to accept or reject; a lost lease records nothing.
 */
export async function recordAbortOutcome(
  outcomes: AttemptOutcomes,
  reason: AbortReason | undefined,
  user: Promise<unknown>,
): Promise<void> {
  const { ref, row } = outcomes;
  if (reason === 'deadline') {
    await outcomes.recordFailure(
      {
        type: 'StartToCloseTimeout',
        message: `attempt ${ref.attempt} passed its start-to-close timeout of ${row.start_to_close_timeout_ms} ms`,
        nonRetryable: false,
      },
      { outcome: 'timed_out' },
    );
  } else if (reason === 'cancelled') {
    await outcomes.recordFailure(serializeFailure(new CancelledFailure('cancel requested', ref)), {
      outcome: 'cancelled',
    });
  } else if (reason === 'shutdown') {
    // Release only if the activity stopped: handing a step to another worker while this one still runs it
    // would overlap executions. One that ignores the signal keeps its lease until it expires (heartbeats stop).
    const settled = await settledWithin(
      user.then(
        () => true,
        () => true,
      ),
      SHUTDOWN_SETTLE_MS,
    );
    if (settled) await outcomes.release('shutdown');
  } else if (reason === 'lease-expired-locally') {
    // The local deadline is a conservative estimate, not the database's verdict: the lease may still be live
    // (the stall ended inside the safety margin) or long superseded (case F01). Once the code has stopped,
    // report its outcome through the usual fenced write and let the database decide: accepted if this attempt
    // still owns the step, otherwise rejected with LeaseLostError and recorded as `attempt:stale-rejected`
    // (invariant 2: never a silent no-op). Code that does not stop in time records nothing; its lease expires.
    const settled = await settledWithin(
      user.then(
        (value) => ({ kind: 'returned' as const, value }),
        (error: unknown) => ({ kind: 'threw' as const, error }),
      ),
      SHUTDOWN_SETTLE_MS,
    );
    if (settled?.kind === 'returned') await outcomes.recordCompletion(settled.value);
    else if (settled) await outcomes.recordFailure(serializeFailure(settled.error));
  }
  // lease-lost: the database already rejected this attempt; nothing more may be recorded.
}
