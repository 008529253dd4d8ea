/**
 * A transaction of the caller's, given as `{ tx }` to a start or an enqueue, as the engine's statements see it:
 * the run is written by the caller's transaction, so it exists if and only if that transaction commits, and the
 * NOTIFY that wakes workers is delivered at its COMMIT (PostgreSQL holds a transaction's notifications until then,
 * and drops them on rollback).
 * @module
 */
import { is, sql, type SQL } from 'drizzle-orm';
import { PgDatabase, PgTransaction } from 'drizzle-orm/pg-core';
import { InvalidOptionsError, PalisadeError, isPalisadeError } from '@palisade/sdk';
import { sqlstateOf } from '../infra-retry.js';
import { wrapDatabaseError, type Database } from './database.js';
import { renderSql } from './render-sql.js';

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

/**
 * Which database a connection is on: the name and oid of its database, the cluster's `system_identifier` (null
 * where the role may not read `pg_control_system()`: managed services revoke it) and the server's start (epoch
 * seconds, as text: never formatted in the session's time zone). Two databases of one cluster differ by oid; two
 * clusters by system identifier (every initdb draws one; every in-memory PGlite too) or, without it, by start.
 */
interface DatabaseIdentity {
  readonly database: string;
  readonly oid: string;
  readonly system: string | null;
  readonly started: string;
}

/** The columns of {@link DatabaseIdentity}; read by a statement that takes no lock and writes nothing. */
const IDENTITY_COLUMNS =
  'current_database() AS palisade_database, ' +
  '(SELECT oid FROM pg_database WHERE datname = current_database())::text AS palisade_database_oid, ' +
  "CASE WHEN has_function_privilege('pg_control_system()', 'execute') " +
  'THEN (SELECT system_identifier::text FROM pg_control_system()) END AS palisade_system, ' +
  'extract(epoch FROM pg_postmaster_start_time())::text AS palisade_started';

interface IdentityRow {
  readonly palisade_database: string;
  readonly palisade_database_oid: string;
  readonly palisade_system: string | null;
  readonly palisade_started: string;
}

function identityOfRow(row: IdentityRow | undefined): DatabaseIdentity | undefined {
  if (row === undefined || typeof row.palisade_database !== 'string') return undefined;
  return {
    database: row.palisade_database,
    oid: row.palisade_database_oid,
    system: row.palisade_system,
    started: row.palisade_started,
  };
}

function sameDatabase(a: DatabaseIdentity, b: DatabaseIdentity): boolean {
  return (
    a.database === b.database &&
    a.oid === b.oid &&
    (a.system === null || b.system === null || a.system === b.system) &&
    a.started === b.started
  );
}

/** The identity of each engine's database, read once per engine handle (and again after a server restart). */
const engineIdentities = new WeakMap<object, Promise<DatabaseIdentity | undefined>>();

/**
 * Read (once; again with `fresh`) which database the engine's handle `db` is on, for the check of a caller's
 * transaction. `createEngine` reads it when it opens the database: on PGlite, one connection, a read at the first
 * start inside a caller's transaction on the same instance would wait for that transaction, which waits for it.
 */
export function engineIdentity(
  db: Pick<Database, 'rows'>,
  fresh = false,
): Promise<DatabaseIdentity | undefined> {
  let identity = engineIdentities.get(db);
  if (identity === undefined || fresh) {
    identity = db
      .rows<IdentityRow>(sql.raw(`SELECT ${IDENTITY_COLUMNS}`))
      .then((rows) => identityOfRow(rows[0]));
    // A failed read is not kept: the next start asks again.
    identity.catch(() => {
      if (engineIdentities.get(db) === identity) engineIdentities.delete(db);
    });
    engineIdentities.set(db, identity);
  }
  return identity;
}

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
  /** The first statement's check that the transaction is open and on the engine's database (see `check`). */
  private checked: Promise<void> | undefined;

  constructor(
    readonly driver: 'postgres' | 'pglite',
    readonly kind: string,
    private readonly client: PostgresTransaction | PgliteTransaction,
    private readonly engine: Pick<Database, 'rows'>,
    private readonly schema: string,
    private readonly where: string,
  ) {}

  private refuse(message: string): InvalidOptionsError {
    return new InvalidOptionsError(this.where, [{ path: 'tx', message: `is ${this.kind} ${message}` }]);
  }

  /**
   * Before the first statement, one round trip that reads which database the transaction is on and, on
   * postgres.js, shows it open:
   * - A transaction of another database with the engine's schema would take the run, and commit it where no worker
   *   of this engine looks. Its identity ({@link DatabaseIdentity}) must be the engine's, read once per engine.
   * - A postgres.js transaction object kept after its `sql.begin` callback returned runs statements on a pooled
   *   connection outside any transaction: the run would be written on its own, whatever became of the caller's
   *   transaction. The driver offers no flag to tell, so the identity is read between a SAVEPOINT and its RELEASE,
   *   sent as one simple-protocol query; PostgreSQL refuses the SAVEPOINT outside a transaction block (25P01).
   * @throws InvalidOptionsError naming `tx` when the transaction has ended or is on another database.
   */
  private check(): Promise<void> {
    return (this.checked ??= (async () => {
      let row: IdentityRow | undefined;
      if ('unsafe' in this.client) {
        let results: unknown;
        try {
          results = await this.client.unsafe(
            `SAVEPOINT palisade_tx_check; SELECT ${IDENTITY_COLUMNS}; RELEASE SAVEPOINT palisade_tx_check`,
            [],
            { prepare: false },
          );
        } catch (error) {
          if (sqlstateOf(error) === '25P01') {
            throw this.refuse(
              "that has ended (its statements would run outside any transaction): start the run inside the transaction's callback",
            );
          }
          throw callerTransactionError(error, this.schema, this.kind);
        }
        // One result per statement (postgres.js 3.x may leave out the last): the SELECT's is the one with rows.
        row = (Array.isArray(results) ? results : [])
          .flatMap((r: unknown) => (Array.isArray(r) ? (r as IdentityRow[]) : []))
          .find((r) => typeof r?.palisade_database === 'string');
      } else {
        [row] = await this.run<IdentityRow>(sql.raw(`SELECT ${IDENTITY_COLUMNS}`));
      }
      const mine = identityOfRow(row);
      // On PGlite only what createEngine read: a read now would wait for the caller's transaction on the one
      // connection, which waits for this start.
      let engines =
        this.driver === 'pglite'
          ? await (engineIdentities.get(this.engine) ?? Promise.resolve(undefined))
          : await engineIdentity(this.engine);
      // The server restarted since the engine read its identity (its start time moved): read it again once. Never
      // on PGlite, which does not restart, and whose one connection the caller's transaction holds.
      if (mine && engines && !sameDatabase(mine, engines) && this.driver === 'postgres') {
        engines = await engineIdentity(this.engine, true);
      }
      if (mine && engines && !sameDatabase(mine, engines)) {
        throw this.refuse(
          `on database "${mine.database}"${mine.database !== engines.database ? '' : this.driver === 'pglite' ? ' of another PGlite instance' : ' of another server'}, not on ` +
            `this engine's database "${engines.database}": the run would be committed where no worker of this engine ` +
            "sees it. Pass a transaction on the engine's database (or give the engine that database)",
        );
      }
    })());
  }

  async rows<T>(query: SQL): Promise<T[]> {
    await this.check();
    return this.run<T>(query);
  }

  private async run<T>(query: SQL): Promise<T[]> {
    const { sql: text, params } = renderSql(query);
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
  engine: {
    readonly driver: 'postgres' | 'pglite';
    readonly schema: string;
    /** The engine's database, whose identity the transaction's must match (read once, cached). */
    readonly database: Pick<Database, 'rows'>;
  },
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
    engine.database,
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
