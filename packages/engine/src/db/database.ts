import type { PGlite } from '@electric-sql/pglite';
import { sql, type SQL } from 'drizzle-orm';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import postgres, { type Sql } from '../../vendor/postgres/index.js';
import { PalisadeError, isPalisadeError } from '@palisade/sdk';
import { classifyDatabaseError } from '../infra-retry.js';
import { renderSql } from './render-sql.js';

/**
 * postgres.js reconnect backoff (seconds) for the clients the engine opens. The driver's default grows as
 * 3^n / 100 s up to 20 s per failed connect, and every failed attempt during an outage counts: after a database
 * restart of a few seconds a worker stayed cut off for up to 20 s more, its leases expiring although the
 * database had long been back (T11 in the chaos suite). Reconnecting is cheap (a refused connect or a
 * "starting up" reply), so the engine retries within half a second, jittered so a fleet does not reconnect in
 * lockstep. Public as `reconnectBackoffSeconds`, for a postgres.js client the host gives the engine (`sql`).
 * @param retries - failed connects in a row (postgres.js's count) @returns seconds, 0.025 to 0.5
 */
export function poolReconnectBackoffSeconds(retries: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, 0.5);
}

/**
 * Reconnect backoff (seconds) of the heartbeat client: short and flat. The heartbeat loop already paces its
 * retries (one in flight, the next a quarter interval after a failure); a driver delay on top only eats into
 * the lease the last heartbeat left.
 */
export function heartbeatReconnectBackoffSeconds(): number {
  return 0.02 + Math.random() * 0.03;
}

/** Any drizzle Postgres database or transaction, whatever the driver. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyPgDatabase = PgDatabase<PgQueryResultHKT, any, any>;

/** A notification handler for LISTEN. */
export type NotifyHandler = (payload: string) => void;

/**
 * The engine's view of one database, whatever the driver: every engine statement goes through drizzle's
 * `sql` template and comes back as plain row objects. Implemented for postgres.js and PGlite.
 */
export interface Database {
  readonly driver: 'postgres' | 'pglite';
  /** The drizzle instance (or transaction) statements run on. */
  readonly drizzle: AnyPgDatabase;
  /** Run one statement and return its rows. */
  rows<T>(query: SQL): Promise<T[]>;
  /** Run `fn` in a READ COMMITTED transaction on one connection; commits if it resolves, rolls back if it throws. */
  transaction<T>(fn: (tx: Database) => Promise<T>): Promise<T>;
  /** LISTEN on `channel`; resolves to an unlisten function. */
  listen(channel: string, handler: NotifyHandler): Promise<() => Promise<void>>;
  /**
   * A handle whose statements run on a connection reserved for lease renewal, so that a pool saturated by
   * activity queries cannot starve heartbeats (DESIGN.md §4 invariant 7). PGlite has one connection: itself.
   */
  reserveHeartbeatConnection(): Promise<Database & { release(): Promise<void> }>;
  /** Close what this handle opened (not a client the caller passed in). */
  close(): Promise<void>;
}

/** How much of a statement's SQL, and of the server's message, a wrapped database error shows. */
const SQL_SHOWN_CHARS = 300;
const MESSAGE_SHOWN_CHARS = 300;

function cut(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

/**
 * The server quotes the offending value in some messages (`invalid input syntax for type integer: "…"`): a long
 * quoted part is a value, not a name (identifiers are at most 63 bytes), and is left out.
 */
function elideValues(message: string): string {
  return message.replace(/"[^"]{64,}"/g, (quoted) => `"(a value of ${quoted.length - 2} characters)"`);
}

/**
 * Wrap an error from the driver as a {@link PalisadeError}: `DATABASE_UNAVAILABLE` for a connection-class error
 * (refused, reset, server shutting down), `DATABASE_ERROR` otherwise. The message has the SQLSTATE, the server's
 * message and the statement cut to a few hundred characters — never the parameter values (drizzle's own error
 * prints them all, which copied whole payloads into logs). `cause` is the driver's error (its SQLSTATE `code`
 * keeps classifying it, see `classifyDatabaseError`), with its parameter fields made non-enumerable so loggers do
 * not print them either. A PalisadeError is returned as it is.
 */
export function wrapDatabaseError(error: unknown): unknown {
  if (isPalisadeError(error) || !(error instanceof Error)) return error;
  const query = (error as { query?: unknown }).query;
  const statement = typeof query === 'string' ? query : undefined;
  const driverError = statement !== undefined && error.cause instanceof Error ? error.cause : error;
  for (const field of ['params', 'parameters', 'args', 'query']) {
    if (Object.prototype.propertyIsEnumerable.call(driverError, field)) {
      Object.defineProperty(driverError, field, { enumerable: false });
    }
  }
  const code = (driverError as { code?: unknown }).code;
  const sqlstate = typeof code === 'string' ? `${code} ` : '';
  const unavailable =
    classifyDatabaseError(driverError) === 'transient' && /^(08|57P0|E[A-Z]|CONNECT)/.test(String(code));
  const where = statement !== undefined ? ` in statement: ${cut(statement, SQL_SHOWN_CHARS)}` : '';
  return new PalisadeError(
    unavailable ? 'DATABASE_UNAVAILABLE' : 'DATABASE_ERROR',
    `${unavailable ? 'cannot reach the database: ' : ''}${sqlstate}${cut(elideValues(driverError.message), MESSAGE_SHOWN_CHARS)}${where}`,
    { cause: driverError },
  );
}

function normalizeRows<T>(result: unknown): T[] {
  if (Array.isArray(result)) return result as T[];
  return (result as { rows?: T[] }).rows ?? [];
}

/** The part of a postgres.js client (or transaction) the prepared path needs. */
interface UnsafeClient {
  unsafe(text: string, params: unknown[], options: { prepare: boolean }): PromiseLike<unknown>;
}

class DrizzleDatabase implements Database {
  /**
   * On postgres.js, the client (or transaction) drizzle runs on: statements go to it directly as named prepared
   * statements. drizzle's `execute()` sends every statement unprepared, which costs a parse and a plan on every
   * call and, for a statement with parameters, a second round trip (postgres.js describes an unnamed statement
   * before it binds it). The engine's statement texts do not vary with their inputs (lists are per worker, sets
   * are array parameters), so the driver's per-connection cache stays small; a client created with
   * `prepare: false` (behind a transaction pooler) is honoured, as the driver ANDs its own option in.
   */
  private readonly client: UnsafeClient | undefined;

  constructor(
    readonly driver: 'postgres' | 'pglite',
    readonly drizzle: AnyPgDatabase,
    private readonly hooks: {
      listen: Database['listen'];
      reserve: Database['reserveHeartbeatConnection'];
      close: () => Promise<void>;
    },
  ) {
    this.client =
      driver === 'postgres' ? (drizzle._.session as unknown as { client: UnsafeClient }).client : undefined;
  }

  async rows<T>(query: SQL): Promise<T[]> {
    try {
      if (this.client) {
        const { sql: text, params } = renderSql(query);
        return normalizeRows<T>(await this.client.unsafe(text, params, { prepare: true }));
      }
      return normalizeRows<T>(await this.drizzle.execute(query));
    } catch (error) {
      throw wrapDatabaseError(error);
    }
  }

  async transaction<T>(fn: (tx: Database) => Promise<T>): Promise<T> {
    // What `fn` throws reaches the caller as it is; only BEGIN/COMMIT failures (the driver's own) are wrapped.
    const fromFn: { error?: unknown } = {};
    try {
      return await this.drizzle.transaction(async (tx) => {
        try {
          return await fn(new DrizzleDatabase(this.driver, tx as AnyPgDatabase, this.hooks));
        } catch (error) {
          fromFn.error = error;
          throw error;
        }
      });
    } catch (error) {
      if ('error' in fromFn && fromFn.error === error) throw error;
      throw wrapDatabaseError(error);
    }
  }

  listen(channel: string, handler: NotifyHandler): Promise<() => Promise<void>> {
    return this.hooks.listen(channel, handler);
  }

  reserveHeartbeatConnection(): Promise<Database & { release(): Promise<void> }> {
    return this.hooks.reserve();
  }

  close(): Promise<void> {
    return this.hooks.close();
  }
}

/**
 * Wrap a postgres.js client. `owned` clients are ended by `close()`.
 * Engine statements are bounded by the server-side `statement_timeout` / `lock_timeout` the caller configured
 * on the connection (the engine's own clients set them, see `connectPostgres`).
 */
export async function fromPostgres(client: Sql, owned: boolean): Promise<Database> {
  const { drizzle } = await import('drizzle-orm/postgres-js');
  const db = drizzle(client) as unknown as AnyPgDatabase;
  const wrap = (c: Sql, close: () => Promise<void>): Database =>
    new DrizzleDatabase('postgres', drizzle(c), {
      listen: async (channel, handler) => {
        const sub = await client.listen(channel, handler);
        return () => sub.unlisten();
      },
      reserve: () => reserve(),
      close,
    });
  const reserve = (): Promise<Database & { release(): Promise<void> }> => {
    // Heartbeats get a small client of their own with the pool's settings (so activity queries cannot starve
    // them), not `client.reserve()`: postgres.js cannot recover a reserved connection whose backend died
    // (pg_terminate_backend, a failover): its later queries never settle and its next write throws an uncaught
    // TypeError (porsager/postgres#1208, #1199), which stopped every heartbeat of the worker for good and hung
    // stop(). A client reconnects instead. Two connections, not one: a one-connection postgres.js client loses
    // the query sent right after its connection was reset. At most one heartbeat is in flight either way.
    const own = postgres({
      ...client.options,
      max: 2,
      backoff: heartbeatReconnectBackoffSeconds,
    } as unknown as postgres.Options<Record<string, never>>);
    const handle = wrap(own, () => Promise.resolve()) as Database & { release(): Promise<void> };
    // Released once the heartbeat loop stopped with nothing in flight: close at once (postgres.js otherwise waits
    // out the whole timeout for a connection whose backend died).
    handle.release = () => own.end({ timeout: 0 });
    return Promise.resolve(handle);
  };
  return new DrizzleDatabase('postgres', db, {
    listen: async (channel, handler) => {
      const sub = await client.listen(channel, handler);
      return () => sub.unlisten();
    },
    reserve,
    close: async () => {
      if (owned) await client.end({ timeout: 5 });
    },
  });
}

/** Wrap a PGlite instance (the embedded, single-process database). `owned` instances are closed by `close()`. */
export async function fromPglite(client: PGlite, owned: boolean): Promise<Database> {
  const { drizzle } = await import('drizzle-orm/pglite');
  const db = drizzle(client) as unknown as AnyPgDatabase;
  const holder: { self?: Database } = {};
  const hooks = {
    listen: async (channel: string, handler: NotifyHandler) => {
      const unlisten = await client.listen(channel, handler);
      return () => unlisten();
    },
    reserve: () => {
      const handle = Object.create(holder.self as Database) as Database & { release(): Promise<void> };
      handle.release = () => Promise.resolve();
      return Promise.resolve(handle);
    },
    close: async () => {
      if (owned && !client.closed) await client.close();
    },
  };
  holder.self = new DrizzleDatabase('pglite', db, hooks);
  return holder.self;
}

/** `"name"` quoted as a SQL identifier. */
export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * `text` as a SQL string literal, for the few statements that must go without parameters (the simple protocol);
 * the `E'…'` form reads the same whatever `standard_conforming_strings` is. `text` must hold no NUL (`checkText`).
 */
export function quoteLiteral(text: string): string {
  return `E'${text.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

/** A SQL fragment naming `<schema>.<object>`, safely quoted. */
export function qualified(schema: string, object: string): SQL {
  return sql.raw(`${quoteIdent(schema)}.${quoteIdent(object)}`);
}
