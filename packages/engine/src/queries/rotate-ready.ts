import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * What one call of {@link rotateReady} did: `rotated` (the oldest slot emptied into the current one, truncated and
 * made current), `busy` (another session is rotating), `early` (the current slot is younger than `minIntervalMs` or
 * smaller than `minBytes`) or `locked` (the oldest slot's lock was not granted within 50 ms: nothing changed).
 */
export type ReadyRotation = 'rotated' | 'busy' | 'early' | 'locked';

export interface RotateReadyParams {
  /** Turn the ring only when the current slot has been current at least this long (ms, server clock); ≥ 0. */
  readonly minIntervalMs: number;
  /** Turn the ring only when the current slot's heap is at least this large (bytes); ≥ 0. */
  readonly minBytes: number;
}

/**
 * One turn of the ring of `ready`'s four slots, if it is due (migration 0026, STORAGE.md §3.6): one statement
 * calling `<schema>.ready_rotate`. Locks, in order: the `ready_ring` row (`FOR UPDATE SKIP LOCKED`: one rotator,
 * never waiting), the oldest slot's rows (`FOR UPDATE SKIP LOCKED`, moved to the current slot while claims go
 * on), then that partition `ACCESS EXCLUSIVE` with `lock_timeout` 50 ms — claims lock every partition of `ready`, so
 * a claim waits on the rotation at most that long, and a rotation that cannot get the lock (a long transaction holds
 * the partition) gives up and undoes its moves rather than queue every claim behind it. Holding the lock, it moves
 * what is left, truncates the partition (which needs no MVCC horizon: the dead versions under a held horizon go
 * with it) and makes it the current slot. No row is lost: nothing can be in flight into or out of a partition whose
 * ACCESS EXCLUSIVE lock this transaction holds. Not inside a caller's transaction: the lock would be held to its
 * end.
 * @throws RangeError when `minIntervalMs` or `minBytes` is negative or not an integer.
 */
export async function rotateReady(
  db: Database,
  n: SchemaNames,
  p: RotateReadyParams,
): Promise<ReadyRotation> {
  for (const [field, value] of [
    ['minIntervalMs', p.minIntervalMs],
    ['minBytes', p.minBytes],
  ] as const) {
    if (!Number.isSafeInteger(value) || value < 0)
      throw new RangeError(`rotateReady: ${field} must be a non-negative integer, got ${String(value)}`);
  }
  const [row] = await db.rows<{ outcome: ReadyRotation }>(
    sql`SELECT ${n.readyRotate}(${p.minIntervalMs}::int, ${p.minBytes}::bigint) AS outcome`,
  );
  if (!row) throw new Error('rotateReady: ready_rotate returned no row');
  return row.outcome;
}
