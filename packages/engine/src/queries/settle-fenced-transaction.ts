import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { stepFence } from './fenced-outcome.js';
import type { SchemaNames } from './schema-names.js';

/** What the server says of a transaction by its id: `txid_status()`. */
export type TransactionStatus = 'committed' | 'aborted' | 'in progress';

/**
 * The outcome of the transaction `xid` (from `txid_current()` inside it), read on another connection: for a
 * fenced transaction whose connection failed while its COMMIT may have been in flight (I15). `'in progress'`
 * while its backend still holds it open. Takes no locks. PostgreSQL keeps the status of recent transactions
 * (far longer than a lease), so `null` (too old to know) does not occur here; it is reported as `'aborted'`
 * only if the server has truly forgotten.
 */
export async function transactionStatus(db: Database, xid: string): Promise<TransactionStatus> {
  const rows = await db.rows<{ status: TransactionStatus | null }>(
    sql`SELECT txid_status(${xid}::bigint) AS status`,
  );
  return rows[0]?.status ?? 'aborted';
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
