/**
 * The rule for a per-call lease (`ctx.run(…, { leaseMs })`, and a client's per-run lease): it may lengthen an
 * activity's lease, never shorten it. Shared by the turn and the client, which check it at their own boundaries.
 */

/**
 * Why a per-run lease may lengthen an activity's lease but not shorten it: workers check their heartbeat
 * interval and safety margin against the activity's lease when they start, so a shorter lease would expire
 * between two healthy heartbeats.
 */
export function shorterLeaseMessage(activityLeaseMs: number, leaseMs: number): string {
  return (
    `must be ≥ the activity's own leaseMs (${activityLeaseMs} ms), got ${leaseMs} ms: workers heartbeat for the ` +
    "activity's lease, so a shorter one would expire while the attempt is healthy; shorten the activity's lease instead"
  );
}
