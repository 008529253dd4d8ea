import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { stepFence } from './fenced-outcome.js';
import type { SchemaNames } from './schema-names.js';

/** What the server says of a transaction by its id: `txid_status()`. */
export type TransactionStatus = 'committed' | 'aborted' | 'in progress';

/**
 * The outcome of the transaction `xid` (from `txid_current()` inside it), read on another connection: for a
 * fenced transaction whose connection failed while its COMMIT may have been in flight (I15). `'in progress'`
 * while its backend still holds it open. Takes no locks. An xid the server calls "in the future" (SQLSTATE 22023)
 * was handed out but never reached the WAL before a crash, so its transaction cannot have committed: `'aborted'`.
 * PostgreSQL keeps the status of recent transactions far longer than a lease; `null` (too old to know) is
 * reported as `'aborted'` only if the server has truly forgotten.
 */
export async function transactionStatus(db: Database, xid: string): Promise<TransactionStatus> {
  try {
    const rows = await db.rows<{ status: TransactionStatus | null }>(
      sql`SELECT txid_status(${xid}::bigint) AS status`,
    );
    return rows[0]?.status ?? 'aborted';
  } catch (error) {
    if (sqlstateOf(error) === '22023') return 'aborted';
    throw error;
  }
}

/** The SQLSTATE of a database error, looking through the driver's wrapping (`cause`). */
function sqlstateOf(error: unknown): string | undefined {
  for (let e = error, depth = 0; e && typeof e === 'object' && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * Whether the attempt still owns the step (the fence predicate, read only: no lock, no write), for deciding what
 * a fenced transaction that surely rolled back tells its caller.
 */
export async function fenceHolds(
  db: Database,
  n: SchemaNames,
  p: { stepId: string; token: bigint; nonce: string },
): Promise<boolean> {
  const rows = await db.rows<{ ok: number }>(
    sql`SELECT 1 AS ok FROM ${n.steps} s WHERE ${stepFence(n, 's', p)}`,
  );
  return rows.length === 1;
}
