import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import {
  fencedInputCte,
  fencedResultColumns,
  rejectionCtes,
  runLockCte,
  settleFencedResult,
  stepFence,
  type AttemptRef,
  type FencedResultRow,
} from './fenced-outcome.js';
import type { SchemaNames } from './schema-names.js';

/**
 * The fence of `ctx.fencedTransaction` (I17), run as the LAST statement of the user's transaction: touches the
 * step row only if the attempt still owns it. If a reclaim committed earlier, the token differs and this
 * matches nothing (the caller rolls back); if not, the row lock taken here is held through COMMIT, so no
 * reclaim can interleave between the check and the commit. It does not lock the step at the start of the
 * transaction: the attempt's own heartbeat would then queue behind the user's writes.
 * @returns true when the fence holds.
 */
export async function fenceStep(
  tx: Database,
  n: SchemaNames,
  p: { stepId: string; token: bigint; nonce: string },
): Promise<boolean> {
  // The lease is judged by the clock read once the step's row lock is held: read before a wait on a row another
  // statement only locked (no recheck follows such a wait), it would pass a lease that ran out meanwhile.
  const rows = await tx.rows<{ ok: number }>(sql`
    WITH lk AS MATERIALIZED (SELECT s.id FROM ${n.steps} s WHERE s.id = ${p.stepId}::uuid FOR NO KEY UPDATE OF s),
    lock_clock AS MATERIALIZED (SELECT ${n.now} AS now_at FROM (SELECT count(*) FROM lk) x)
    UPDATE ${n.steps} s SET last_fenced_write_at = (SELECT now_at FROM lock_clock)
     WHERE ${stepFence(n, 's', p, sql`(SELECT now_at FROM lock_clock)`)} RETURNING 1 AS ok`);
  return rows.length === 1;
}

/**
 * Record, in its own statement, that a fenced write of `operation` was rejected (used when the write's own
 * transaction had to roll back, taking any event written inside it along), and throw {@link LeaseLostError}.
 */
export async function recordStaleRejection(
  db: Database,
  n: SchemaNames,
  p: AttemptRef & { nonce: string; operation: 'fenced-transaction' | 'heartbeat' },
): Promise<never> {
  const rows = await db.rows<FencedResultRow>(sql`
    WITH ${fencedInputCte([p])},
    ${runLockCte(n)},
    applied AS (SELECT NULL::uuid AS id, NULL::bigint AS fencing_token WHERE false),
    ${rejectionCtes(n, p)}
    SELECT ${fencedResultColumns} FROM inp i`);
  settleFencedResult(rows[0], p, p.operation);
  throw new Error('unreachable: a fenced write with nothing applied was settled as applied');
}
