import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'drizzle-orm';
import { LeaseLostError, PalisadeError, type FencedTransaction } from '@palisade/sdk';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { faultHooks } from '../internal/fault-points.js';
import { classifyDatabaseError, sqlstateOf, withInfraRetry } from '../infra-retry.js';
import { fenceStep, recordStaleRejection } from '../queries/fence-step.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';
import {
  fenceHolds,
  transactionStatus,
  type TransactionStatus,
} from '../queries/settle-fenced-transaction.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { openFencedTransaction } from '../db/fenced-scope.js';
import { monotonicNow } from './lease-clock.js';

/** Poll interval while a broken fenced transaction is still in progress on the server (ms). */
const SETTLE_POLL_MS = 50;

class FenceFailed extends Error {}

/** What `ctx.fencedTransaction` needs from its attempt. */
export interface FencedTransactionOptions {
  readonly db: Database;
  readonly names: SchemaNames;
  readonly logger: Logger;
  /** The attempt, by its fence (step, token, nonce). */
  readonly ref: AttemptRef & { readonly nonce: string };
  /** `name#seq`, for messages. */
  readonly label: string;
  /** The attempt's lease (ms): bounds each statement and the time the transaction may sit idle (I16). */
  readonly leaseMs: number;
  /** Throws if the attempt may not make another owner write (poisoned, aborted, local deadline passed). */
  assertUsable(): void;
  /** The database rejected the attempt: poison its context and fire its signal. */
  leaseLost(error: LeaseLostError): void;
  /** The attempt's local lease deadline now (monotonic ms): how long to try to settle a broken transaction. */
  localDeadlineMs(): number;
}

/**
 * `ctx.fencedTransaction(fn)`: run `fn` in a transaction whose last statement is the fence (the step still held
 * by this token and nonce, its lease unexpired), so the user's writes commit only while the attempt owns its step.
 * A failed fence is recorded as a stale write and throws {@link LeaseLostError}; a COMMIT whose outcome the
 * connection lost is settled by its transaction id (I15).
 * @throws PalisadeError `FENCED_TRANSACTION_NESTED` inside another fenced transaction; `FENCED_TRANSACTION_ABORTED`
 * when `fn` caught an SQL error and went on; LeaseLostError when the fence failed; what `fn` throws.
 */
export async function runFencedTransaction<T>(
  fn: (tx: FencedTransaction) => Promise<T>,
  o: FencedTransactionOptions,
): Promise<T> {
  const outer = openFencedTransaction.getStore();
  if (outer !== undefined) {
    throw new PalisadeError(
      'FENCED_TRANSACTION_NESTED',
      `ctx.fencedTransaction was called inside the fenced transaction of ${outer}; fenced transactions do not ` +
        'nest (the inner one would commit, or wait, on its own connection): use the outer `tx` instead',
      o.ref,
    );
  }
  o.assertUsable();
  const { db, names } = o;
  const idleMs = Math.max(500, Math.floor(o.leaseMs / 3));
  let xid: string | undefined;
  let done: { result: T } | undefined;
  try {
    return await db.transaction(async (tx) => {
      // A frozen process must not hold the step's row lock (taken by the fence) or the user's locks forever (I16).
      // The transaction id comes with it, at no extra round trip, to settle a COMMIT whose reply is lost (I15).
      const [head] = await tx.rows<{ xid: string }>(sql`
        SELECT set_config('idle_in_transaction_session_timeout', ${String(idleMs)}, true),
               set_config('statement_timeout', ${String(o.leaseMs)}, true), txid_current()::text AS xid`);
      xid = head?.xid;
      let result: T;
      try {
        result = await openFencedTransaction.run(o.label, () => fn(tx.drizzle));
      } catch (error) {
        throw sqlstateOf(error) === '25P02' ? abortedTransaction(o, error) : error;
      }
      o.assertUsable();
      const stall = faultHooks['fenced-transaction:before-fence'];
      if (stall) await stall(o.ref);
      let held: boolean;
      try {
        held = await fenceStep(tx, names, o.ref);
      } catch (error) {
        throw sqlstateOf(error) === '25P02' ? abortedTransaction(o, error) : error;
      }
      if (!held) throw new FenceFailed();
      const pause = faultHooks['fenced-transaction:before-commit'];
      if (pause) await pause(o.ref);
      done = { result };
      return result;
    });
  } catch (error) {
    if (error instanceof FenceFailed) await recordStaleTransaction(o);
    if (xid !== undefined && error instanceof Error && classifyDatabaseError(error) === 'transient') {
      await settleBrokenTransaction(o, xid, error);
      // Committed: COMMIT is sent only after `fn` resolved and the fence held, so `done` is set.
      if (done) return done.result;
    }
    throw error;
  }
}

/** The callback left its transaction aborted (SQLSTATE 25P02): say so, instead of a bare driver error. */
function abortedTransaction(o: FencedTransactionOptions, cause: unknown): PalisadeError {
  return new PalisadeError(
    'FENCED_TRANSACTION_ABORTED',
    `the fenced transaction of ${o.label} was aborted by an SQL error inside its callback, which the callback ` +
      'caught and went on (SQLSTATE 25P02: every later statement is refused); nothing it wrote is committed. ' +
      'Let the error propagate, or wrap the statement that may fail in a savepoint (tx.transaction(...))',
    { ...o.ref, cause },
  );
}

/**
 * A fenced transaction failed with a connection-class error (server ended the session, connection reset, reply
 * lost): whether it committed is unknown to the driver. Settle it on another connection by its transaction id
 * rather than hand the caller an ambiguous error (I15): `'committed'` (the COMMIT went through; the caller gets
 * its result), or rolled back — then if the attempt no longer owns the step the caller gets
 * {@link LeaseLostError} (recorded, and the context is poisoned, as for a failed fence), and otherwise the
 * original error, which now surely means "not committed". A transaction still in progress (its backend has not
 * yet noticed the broken connection) is polled until the local lease deadline; if it is still unknown then, or
 * the database cannot be reached, the original error is thrown.
 * @returns only when the transaction committed; throws otherwise.
 */
async function settleBrokenTransaction(
  o: FencedTransactionOptions,
  xid: string,
  original: Error,
): Promise<'committed'> {
  const { db, names } = o;
  let status: TransactionStatus;
  let holds: boolean;
  try {
    const giveUpAt = Math.max(o.localDeadlineMs(), monotonicNow() + 1_000);
    for (;;) {
      status = await withInfraRetry(() => transactionStatus(db, xid), {
        maxRetryTimeMs: Math.max(500, giveUpAt - monotonicNow()),
      });
      if (status !== 'in progress' || monotonicNow() >= giveUpAt) break;
      await sleep(SETTLE_POLL_MS);
    }
    if (status === 'committed') return 'committed';
    if (status === 'in progress') throw original;
    holds = await withInfraRetry(() => fenceHolds(db, names, o.ref), { maxRetryTimeMs: 1_000 });
  } catch (error) {
    if (error !== original) {
      o.logger.warn({ step: o.label, err: error }, 'attempt:fenced-transaction-unsettled');
    }
    throw original;
  }
  if (holds) throw original;
  try {
    await recordStaleTransaction(o);
  } catch (error) {
    if (error instanceof LeaseLostError) throw error;
  }
  throw original;
}

/**
 * Record the attempt's fenced transaction as a stale write. The database's answer is its verdict, a
 * LeaseLostError naming why: it poisons the attempt (`leaseLost`) and is thrown; any other error is thrown as is.
 */
async function recordStaleTransaction(o: FencedTransactionOptions): Promise<void> {
  try {
    await recordStaleRejection(o.db, o.names, { ...o.ref, operation: 'fenced-transaction' });
  } catch (error) {
    if (error instanceof LeaseLostError) o.leaseLost(error);
    throw error;
  }
}
