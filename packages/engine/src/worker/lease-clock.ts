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
 * Whether a grant is fresh enough to start (I12): at least `minFreshness` of the lease the claim granted must be
 * left when its reply is handled. `grantedLeaseMs` is what the claim granted, `min(leaseMs, startToCloseTimeoutMs)`
 * (the claim caps a lease by the attempt deadline). What counts as used up is what the round trip and any lease the
 * database had already consumed cost; the margin M and the drift allowance ρ are deducted from every grant alike
 * and are credited back. Judged against the nominal lease, or with M counted, a lease capped by a short
 * start-to-close timeout (or a high `minFreshness`) made every grant stale: the step was released and reclaimed
 * forever and never ran.
 */
export function isGrantFresh(
  deadlineMs: number,
  nowMs: number,
  grantedLeaseMs: number,
  minFreshness: number,
  s: LeaseClockSettings,
): boolean {
  const leftMs = deadlineMs - nowMs + s.safetyMarginMs + grantedLeaseMs * s.clockRateError;
  return leftMs >= minFreshness * grantedLeaseMs;
}
