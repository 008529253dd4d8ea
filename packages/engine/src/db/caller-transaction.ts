/**
 * A transaction of the caller's, given as `{ tx }` to a start or an enqueue, as the engine's statements see it:
 * the run is written by the caller's transaction, so it exists if and only if that transaction commits, and the
 * NOTIFY that wakes workers is delivered at its COMMIT (PostgreSQL holds a transaction's notifications until then,
 * and drops them on rollback).
 * @module
 */
import { is, type SQL } from 'drizzle-orm';
import { PgDatabase, PgDialect, PgTransaction } from 'drizzle-orm/pg-core';
import { InvalidOptionsError, PalisadeError, isPalisadeError } from '@palisade/sdk';
import { sqlstateOf } from '../infra-retry.js';
import { inSavepoint } from '../queries/savepoint.js';
import { wrapDatabaseError, type Database } from './database.js';

/** The caller's transaction, running engine statements. */
export interface CallerTransaction extends Pick<Database, 'driver' | 'rows'> {
  /** What it is, for messages: `a postgres.js transaction`, `a drizzle transaction (PGlite)`… */
  readonly kind: string;
}

/** The part of a postgres.js transaction (`sql.begin(async (tx) => …)`) the engine uses. */
interface PostgresTransaction {
  unsafe(text: string, params: unknown[], options: { prepare: boolean }): PromiseLike<unknown>;
}

/** The part of a PGlite transaction (`pglite.transaction(async (tx) => …)`) the engine uses. */
interface PgliteTransaction {
  query(text: string, params: unknown[]): Promise<{ rows: unknown[] }>;
  readonly closed: boolean;
}

const dialect = new PgDialect();

/**
 * SQLSTATEs a statement on a database without the engine's schema fails with: invalid_schema_name,
 * undefined_table, undefined_function (`<schema>.now()`).
 */
const NO_SCHEMA = new Set(['3F000', '42P01', '42883']);

function hasFunction(value: unknown, name: string): boolean {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as Record<string, unknown>)[name] === 'function'
  );
}

function isPostgresTransaction(value: unknown): value is PostgresTransaction {
  // A postgres.js transaction (and a savepoint of one) is a tagged-template function with `savepoint`; the client
  // and a reserved connection have `unsafe` but no `savepoint`.
  return typeof value === 'function' && hasFunction(value, 'unsafe') && hasFunction(value, 'savepoint');
}

function isPgliteTransaction(value: unknown): value is PgliteTransaction {
  // PGlite's Transaction: query/exec/rollback and `closed`; the PGlite instance itself has no `rollback`.
  return (
    hasFunction(value, 'query') &&
    hasFunction(value, 'exec') &&
    hasFunction(value, 'rollback') &&
    typeof (value as { closed?: unknown }).closed === 'boolean'
  );
}

/**
 * The statements of a start or an enqueue, run on `client` (a postgres.js or PGlite transaction): through
 * postgres.js's `unsafe()` as named prepared statements, as the engine's own client runs them — never through a
 * drizzle instance built on the caller's client, since drizzle's postgres-js driver rewrites the client's
 * parsers and serializers, which the caller's other queries rely on. The engine's statements pass jsonb as text
 * (`$1::text::jsonb`), so they need none of those serializers. Errors come back as PalisadeErrors that say the
 * caller's transaction failed (see {@link callerTransactionError}).
 */
class TransactionStatements implements CallerTransaction {
  /** Whether the first statement has shown the transaction open (postgres.js only: see `assertOpen`). */
  private open: Promise<void> | undefined;

  constructor(
    readonly driver: 'postgres' | 'pglite',
    readonly kind: string,
    private readonly client: PostgresTransaction | PgliteTransaction,
    private readonly schema: string,
    private readonly where: string,
  ) {}

  /**
   * A postgres.js transaction object kept after its `sql.begin` callback returned runs statements on a pooled
   * connection outside any transaction: the run would be written on its own, whatever became of the caller's
   * transaction. The driver offers no flag to tell, so the first statement opens and releases an empty savepoint
   * ({@link inSavepoint}), which PostgreSQL refuses outside a transaction block (25P01).
   * @throws InvalidOptionsError naming `tx` when the transaction has ended.
   */
  private assertOpen(): Promise<void> {
    return (this.open ??= inSavepoint({ rows: (q) => this.run(q) }, () => Promise.resolve()).catch(
      (error: unknown) => {
        if (sqlstateOf(error) !== '25P01') throw error;
        throw new InvalidOptionsError(this.where, [
          {
            path: 'tx',
            message: `is ${this.kind} that has ended (its statements would run outside any transaction): start the run inside the transaction's callback`,
          },
        ]);
      },
    ));
  }

  async rows<T>(query: SQL): Promise<T[]> {
    if ('unsafe' in this.client) await this.assertOpen();
    return this.run<T>(query);
  }

  private async run<T>(query: SQL): Promise<T[]> {
    const { sql: text, params } = dialect.sqlToQuery(query);
    try {
      if ('unsafe' in this.client) {
        const result = await this.client.unsafe(text, params, { prepare: true });
        return (Array.isArray(result) ? result : []) as T[];
      }
      return (await this.client.query(text, params)).rows as T[];
    } catch (error) {
      throw callerTransactionError(error, this.schema, this.kind);
    }
  }
}

/**
 * An error of a statement run in the caller's transaction, as a PalisadeError that names it: `DATABASE_ERROR`
 * naming the engine's schema when the transaction's database has none (SQLSTATE 3F000, 42P01, 42883: not migrated,
 * another database, another schema); otherwise the driver's error as {@link wrapDatabaseError} shows it. Nothing
 * is retried inside the caller's transaction: on PostgreSQL a failed statement has aborted it, so the message
 * says to roll it back (the caller retries the whole transaction, e.g. on a serialization failure).
 */
export function callerTransactionError(error: unknown, schema: string, kind: string): unknown {
  if (isPalisadeError(error)) return error;
  const wrapped = wrapDatabaseError(error);
  if (!isPalisadeError(wrapped)) return wrapped;
  const state = sqlstateOf(error);
  const aborted = 'the transaction is aborted: roll it back (and retry it whole if the error is transient)';
  if (state !== undefined && NO_SCHEMA.has(state)) {
    return new PalisadeError(
      'DATABASE_ERROR',
      `the database of the transaction given as tx (${kind}) has no engine schema "${schema}" (SQLSTATE ${state}): ` +
        `pass a transaction on the engine's database, migrated (\`palisade migrate\` or createEngine()); ${aborted}`,
      { cause: wrapped.cause ?? error },
    );
  }
  return new PalisadeError(wrapped.code, `in the transaction given as tx: ${wrapped.message}; ${aborted}`, {
    cause: wrapped.cause ?? error,
  });
}

/**
 * The transaction `tx` given to a start or an enqueue, checked and wrapped, for an engine on `driver` whose schema
 * is `schema`. Accepted: a postgres.js transaction (the `tx` of `sql.begin(async (tx) => …)`, or of a savepoint);
 * a drizzle transaction (`db.transaction(async (tx) => …)`) on the postgres-js or PGlite driver; a PGlite
 * transaction (`pglite.transaction(async (tx) => …)`). It must be on the engine's driver and database, and open.
 * @throws InvalidOptionsError (`where`, naming `tx`) for anything else: a client or database that is not a
 * transaction, a transaction of another driver than the engine's, a drizzle transaction on another driver, a
 * PGlite transaction that has ended.
 */
export function callerTransaction(
  tx: unknown,
  engine: { readonly driver: 'postgres' | 'pglite'; readonly schema: string },
  where: string,
): CallerTransaction {
  const refuse = (message: string) => new InvalidOptionsError(where, [{ path: 'tx', message }]);
  let client: unknown = tx;
  let kind: string;
  if (is(tx, PgTransaction)) {
    client = (tx as unknown as { _: { session: { client?: unknown } } })._.session.client;
    kind = isPgliteTransaction(client)
      ? 'a drizzle transaction (PGlite)'
      : 'a drizzle transaction (postgres-js)';
  } else if (is(tx, PgDatabase)) {
    throw refuse(
      'is a drizzle database, not a transaction: pass the tx of `db.transaction(async (tx) => …)` (outside a ' +
        'transaction, leave tx out)',
    );
  } else {
    kind = isPgliteTransaction(tx) ? 'a PGlite transaction' : 'a postgres.js transaction';
  }
  const driver = isPostgresTransaction(client)
    ? 'postgres'
    : isPgliteTransaction(client)
      ? 'pglite'
      : undefined;
  if (driver === undefined) {
    if (client !== tx) {
      throw refuse(
        'is a drizzle transaction on a driver the engine does not support: use drizzle on postgres-js or PGlite',
      );
    }
    if (typeof client === 'function' && hasFunction(client, 'unsafe')) {
      throw refuse(
        'is a postgres.js client, not a transaction: pass the tx of `sql.begin(async (tx) => …)` (outside a ' +
          'transaction, leave tx out)',
      );
    }
    if (hasFunction(client, 'query') && hasFunction(client, 'transaction')) {
      throw refuse(
        'is a PGlite database, not a transaction: pass the tx of `db.transaction(async (tx) => …)` (outside a ' +
          'transaction, leave tx out)',
      );
    }
    throw refuse(
      `must be a transaction: of postgres.js (sql.begin), of drizzle on postgres-js or PGlite ` +
        `(db.transaction), or of PGlite; got ${describeValue(tx)}`,
    );
  }
  if (driver !== engine.driver) {
    throw refuse(
      `is ${kind}, but this engine runs on ${engine.driver === 'pglite' ? 'PGlite' : 'PostgreSQL (postgres.js)'}: ` +
        "a run can only share the transaction of a write on the engine's own database",
    );
  }
  if (driver === 'pglite' && (client as PgliteTransaction).closed) {
    throw refuse(`is ${kind} that has ended: start the run inside the transaction's callback`);
  }
  return new TransactionStatements(
    driver,
    kind,
    client as PostgresTransaction | PgliteTransaction,
    engine.schema,
    where,
  );
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value !== 'object') return typeof value;
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== 'Object' ? `an instance of ${name}` : 'an object';
}
