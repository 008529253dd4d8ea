/**
 * The transactions of the caller's that a start or an enqueue accepts as `{ tx }`, by shape: the host's copy of
 * postgres.js, PGlite or drizzle may be another version than the engine's, so no class is required, only the
 * methods the engine calls. `callerTransaction()` (db/caller-transaction.ts) checks the value at run time.
 * @module
 */
import type { PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';

/**
 * A postgres.js transaction: the `tx` of `sql.begin(async (tx) => …)`, or of `tx.savepoint(async (sp) => …)` in
 * it (postgres.js `TransactionSql`). The engine runs its statements through `unsafe`.
 */
export interface PostgresJsTransactionLike {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  unsafe(query: string, parameters?: any[], options?: any): PromiseLike<unknown>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  savepoint(...args: any[]): Promise<unknown>;
}

/**
 * A PGlite transaction: the `tx` of `pglite.transaction(async (tx) => …)` (PGlite `Transaction`), still open
 * (`closed` false).
 */
export interface PgliteTransactionLike {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  query(query: string, params?: any[], options?: any): Promise<{ readonly rows: unknown[] }>;
  readonly closed: boolean;
}

/**
 * A drizzle transaction on the postgres-js or PGlite driver: the `tx` of `db.transaction(async (tx) => …)` (or of a
 * nested `tx.transaction(…)`, a savepoint).
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type DrizzleTransactionLike = PgTransaction<PgQueryResultHKT, any, any>;

/**
 * The caller's open transaction, for a start or an enqueue that commits with it (`{ tx }`): the run exists if and
 * only if this transaction commits, and workers are woken at its COMMIT, never before. One of: the `tx` of a
 * postgres.js `sql.begin(async (tx) => …)` (or of a savepoint in it); the `tx` of a drizzle
 * `db.transaction(async (tx) => …)` on the postgres-js or PGlite driver; the `tx` of a PGlite
 * `pglite.transaction(async (tx) => …)`. It must be on the engine's database and driver (postgres.js for an
 * engine on PostgreSQL, PGlite for an embedded engine), and still open; anything else is refused with
 * `INVALID_OPTIONS` naming `tx` (a drizzle database that is not a transaction, a transaction of another database or
 * driver, a PGlite transaction that has ended).
 */
export type CallerTransactionLike =
  PostgresJsTransactionLike | PgliteTransactionLike | DrizzleTransactionLike;
