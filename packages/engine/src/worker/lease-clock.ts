/**
 * The worker's conservative local view of a lease (I9, I11, I12), on the monotonic clock. Pure arithmetic:
 * no timers, no database.
 *
 * `deadline = t_send + remaining × (1 − ρ) − M`, where `t_send` is when the request of the last successful
 * claim or heartbeat was *sent* (not when its reply arrived: the reply's time in flight is then counted
 * against us), `remaining` is the lease left as the database computed it, ρ the assumed clock-rate error and
 * M the safety margin. Only a successful reply moves the deadline, and only forward.
 */
export interface LeaseClockSettings {
  readonly clockRateError: number;
  readonly safetyMarginMs: number;
}

/** Monotonic milliseconds (never use `Date.now()` for lease arithmetic). */
export function monotonicNow(): number {
  return performance.now();
}

/** The local deadline after a successful claim or heartbeat sent at `sentAtMs` that reported `remainingMs`. */
export function localLeaseDeadline(sentAtMs: number, remainingMs: number, s: LeaseClockSettings): number {
  return sentAtMs + remainingMs * (1 - s.clockRateError) - s.safetyMarginMs;
}

/**
 * Whether a grant is fresh enough to start (I12): the local lease left when the claim reply arrived must be at
 * least `minFreshness × leaseMs`; otherwise the worker releases the step unstarted.
 */
export function isGrantFresh(
  deadlineMs: number,
  nowMs: number,
  leaseMs: number,
  minFreshness: number,
): boolean {
  return deadlineMs - nowMs >= minFreshness * leaseMs;
}
