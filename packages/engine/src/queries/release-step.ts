import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import {
  fencedInputCte,
  fencedResultColumns,
  rejectionCtes,
  runLockCte,
  settleFencedResult,
  stepFenceOnInput,
  type AttemptRef,
  type FencedResultRow,
} from './fenced-outcome.js';
import { grantColumns, recordEndedGrants } from './ended-grants.js';
import type { SchemaNames } from './schema-names.js';

export interface ReleaseStepParams extends AttemptRef {
  readonly nonce: string;
  /** Why: `shutdown` (worker stopping) or `stale-grant` (the claim arrived with too little lease left). */
  readonly why: 'shutdown' | 'stale-grant' | 'ambiguous-claim';
}

/**
 * Hand a step back, claimable at once by any worker (no waiting for the lease to expire): only if the fence
 * holds, the step returns to `scheduled` with `next_run_at = now`, and the released claim is not charged to the
 * retry budget (`attempt − 1`; `epoch` keeps counting it). The attempt row ends `released`, an
 * `attempt:released` event is appended and workers are NOTIFYed. The release is the attempt's own ending
 * (`ended_nonce`), so a heartbeat of it still in flight is not taken for a lost lease. A rejection is recorded
 * in the same statement and raises {@link LeaseLostError}.
 *
 * A grant that never started (`stale-grant`, `ambiguous-claim`) is released even if its lease has already
 * expired, as long as no other claim took the step (same token and nonce, still `running`). Such a release
 * arrives late exactly when the link is slow — the reason the grant was stale — and on a fresh connection its
 * handshake costs several more slow round trips (T13 in the chaos suite). Rejected as `expired`, the never-run
 * claim was charged to the retry budget when the step was reclaimed, so a slow link could exhaust a step's
 * attempts without running it once. This does not revive a lease (expiry stays final, I4): the step only
 * becomes claimable, which it already was, and no effect of the attempt exists to fence. Under row lock, a
 * concurrent claim that took the step first changes the token, and the release is rejected as `superseded`.
 * Locks, in the one order (invariant 14): the run row (`run_lock`), then the step row (`step_lock`).
 */
export async function releaseStep(db: Database, n: SchemaNames, p: ReleaseStepParams): Promise<void> {
  const fence =
    p.why === 'shutdown'
      ? stepFenceOnInput(n, 's')
      : sql`s.id = i.step_id AND s.fencing_token = i.token AND s.nonce = i.nonce AND s.status = 'running'`;
  const rows = await db.rows<FencedResultRow>(sql`
    WITH ${fencedInputCte([p])},
    ${runLockCte(n)},
    applied AS (
      UPDATE ${n.steps} s
         SET status = 'scheduled', attempt = s.attempt - 1, next_run_at = ${n.now}, lease_expires_at = NULL,
             ended_nonce = s.nonce
        FROM inp i
       WHERE ${fence} AND s.id IN (SELECT id FROM step_lock)
      RETURNING ${grantColumns('s')}, s.queue),
    -- The attempt it ends, as claimed: the release gave its claim back to the retry budget (attempt - 1 above).
    ${recordEndedGrants(n, { name: 'ended', from: sql`applied`, outcome: sql`'released'`, endedAt: n.now, attempt: sql`g.attempt + 1` })},
    step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, at)
      SELECT run_id, id, 'attempt:released', attempt + 1, epoch, fencing_token, worker_id,
             jsonb_build_object('why', ${p.why}::text), ${n.now}
        FROM applied
      RETURNING 1),
    notified AS (SELECT pg_notify(${n.channel}, 'step:' || queue) FROM applied),
    ${rejectionCtes(n, { operation: 'release' })}
    SELECT ${fencedResultColumns},
           (SELECT count(*) FROM ended) + (SELECT count(*) FROM step_event) + (SELECT count(*) FROM notified) AS effects
      FROM inp i`);
  settleFencedResult(rows[0], p, 'release');
}
