import { AsyncLocalStorage } from 'node:async_hooks';
import { PalisadeError } from '@palisade/sdk';
import type { Database } from './database.js';

/**
 * The fenced transaction whose callback is running in this async context, by its step label. A fenced transaction
 * opened inside another one's callback is refused: on PGlite (one connection) it waited forever for the outer
 * one's lock and hung the whole engine, and on PostgreSQL it committed on its own connection although the outer
 * one could still roll back.
 */
export const openFencedTransaction = new AsyncLocalStorage<string>();

/**
 * Refuse a call that needs the engine's database from inside a fenced transaction's callback on PGlite: the open
 * transaction holds its one connection, so the call would wait for the transaction and the transaction for it.
 * @throws PalisadeError `FENCED_TRANSACTION_NESTED`.
 */
export function assertUsableOutsideTransaction(db: Database, what: string): void {
  const label = openFencedTransaction.getStore();
  if (label === undefined || db.driver !== 'pglite') return;
  throw new PalisadeError(
    'FENCED_TRANSACTION_NESTED',
    `${what} was called inside the fenced transaction of ${label} on the embedded database (PGlite), whose one ` +
      'connection the transaction holds; call it before or after the transaction',
  );
}
