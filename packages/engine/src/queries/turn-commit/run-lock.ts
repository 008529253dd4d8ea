import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';
import { liveRunStatuses } from '../status-sql.js';

/**
 * The fence on the run row (`parent_lk`, `lk`, `lock_clock`, `fence`).
 *
 * Locks: when the run ends, its parent's run row first (`FOR NO KEY UPDATE`: the end completes the parent's child
 * step and wakes the parent; an ancestor is locked before its descendants, as a cancel that cascades locks them);
 * then the run's own row (`FOR NO KEY UPDATE`, held to COMMIT, so no other turn of the run commits in between). The
 * turn's lease is judged by the clock read once that lock is held. Everything the commit writes waits for `fence`.
 */
export function runLockCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, ending } = plan;
  return sql`${
    ending
      ? sql`-- A run that ends completes its parent's child step and wakes the parent: the parent's run row is locked
    -- first, before this run's (an ancestor before its descendants, as a cancel that cascades locks them).
    parent_lk AS MATERIALIZED (
      SELECT p.id FROM ${n.runs} p
       WHERE p.id = (SELECT c.parent_run_id FROM ${n.runs} c WHERE c.id = ${runId}::uuid)
         FOR NO KEY UPDATE OF p),`
      : sql``
  }
    lk AS MATERIALIZED (
      SELECT r.id, r.queue, r.status, r.turn_token, r.turn_nonce, r.turn_lease_expires_at, r.turn_epoch,
             r.turn_attempt, r.turn_worker_id, r.wake_count, r.turn_next_run_at,
             r.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM ${n.runs} r
       WHERE r.id = ${runId}::uuid${ending ? sql` AND (SELECT count(*) FROM parent_lk) >= 0` : sql``}
         FOR NO KEY UPDATE OF r),
    -- The turn's lease is judged by the clock read once the run row is locked: read before a wait on a row
    -- another statement only locked (no recheck follows), it would pass a lease that ran out meanwhile.
    lock_clock AS MATERIALIZED (SELECT ${n.now} AS t FROM (SELECT count(*) FROM lk) x),
    fence AS MATERIALIZED (
      SELECT lk.* FROM lk
       WHERE ${runFence(plan)} AND lk.status IN ${liveRunStatuses}),`;
}

/**
 * The fence on the run row: the claim's (token, nonce, unexpired lease), or a fused step's (no turn granted since
 * the kept instance's last turn, nothing woke the run, no turn due, no cancel request, its time not ahead of the
 * database clock: see `commitFusedTurn`).
 */
function runFence(plan: TurnCommitPlan): SQL {
  const { grant } = plan;
  return grant.kind === 'claimed'
    ? sql`lk.turn_token = ${grant.ref.token.toString()}::bigint AND lk.turn_nonce = ${grant.ref.nonce}::uuid
         AND lk.turn_lease_expires_at > (SELECT t FROM lock_clock)`
    : sql`lk.turn_lease_expires_at IS NULL AND lk.turn_epoch = ${grant.fused.turnEpoch}::int
         AND lk.turn_attempt = ${grant.fused.turnAttempt}::int AND lk.turn_worker_id = ${grant.fused.workerId}
         AND lk.wake_count = ${grant.fused.wakeCount}::int AND NOT lk.cancel_requested
         AND (lk.turn_next_run_at IS NULL OR lk.turn_next_run_at > (SELECT t FROM lock_clock))
         AND ${grant.fused.nowMs}::float8 <= extract(epoch FROM (SELECT t FROM lock_clock)) * 1000`;
}
