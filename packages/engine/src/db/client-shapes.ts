/**
 * What `createEngine` accepts as a database handle or a logger, checked by shape before anything is opened: a value
 * of the wrong kind (a URL where a client goes, `true` for a logger) is refused with `INVALID_OPTIONS` naming the
 * option, instead of failing deep inside drizzle or pino after a pool was opened. Shapes, not `instanceof`: the
 * host's copy of postgres.js, PGlite or drizzle may be another version than the engine's.
 * @module
 */
import { is } from 'drizzle-orm';
import { PgDatabase, PgTransaction } from 'drizzle-orm/pg-core';

/**
 * The part of a postgres.js client (3.x or 4.x) the engine uses: it runs its statements through `unsafe`, its
 * transactions through `begin`, listens with `listen`, reads `options` to open a heartbeat client with the same
 * settings, and never ends a client it was given.
 */
export interface PostgresJsClient {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  (...args: any[]): any;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  unsafe(query: string, parameters?: any[], options?: any): any;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  begin(...args: any[]): Promise<any>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  listen(channel: string, onnotify: (payload: string) => void, ...rest: any[]): Promise<any>;
  end(options?: { timeout?: number | null | undefined }): Promise<void>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly options: { readonly parsers: Record<string, any>; readonly serializers: Record<string, any> };
}

/** The part of a pino logger the engine calls. */
export interface LoggerLike {
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
}

function hasFunctions(value: unknown, names: readonly string[]): boolean {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    names.every((n) => typeof (value as Record<string, unknown>)[n] === 'function')
  );
}

/** What a value is, for a message that must not echo it (a URL may hold a password). */
export function describeKind(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'string') return 'a string';
  if (typeof value !== 'object' && typeof value !== 'function') return `a ${typeof value}`;
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  if (typeof value === 'function') return 'a function';
  return typeof name === 'string' && name !== 'Object' ? `an instance of ${name}` : 'an object';
}

/** Why `value` is not a postgres.js client, or undefined when it is one. */
export function postgresClientProblem(value: unknown): string | undefined {
  if (typeof value === 'string') {
    return 'must be a postgres.js client (`postgres(url)`), not a string: give a connection URL as databaseUrl';
  }
  if (
    typeof value === 'function' &&
    hasFunctions(value, ['unsafe', 'begin', 'listen', 'end']) &&
    typeof (value as { options?: { parsers?: unknown } }).options?.parsers === 'object'
  ) {
    if (hasFunctions(value, ['savepoint'])) {
      return 'is a postgres.js transaction, not a client: give the client (`postgres(url)`); pass a transaction as `tx` to a start';
    }
    return undefined;
  }
  return `must be a postgres.js client (\`postgres(url)\`, version 3 or 4); got ${describeKind(value)}`;
}

/** Why `value` is not a PGlite instance, or undefined when it is one. */
export function pgliteProblem(value: unknown): string | undefined {
  if (typeof value === 'string') {
    return 'must be a PGlite instance (`new PGlite(dir)`), not a string: give a directory as dataDir';
  }
  if (
    hasFunctions(value, ['query', 'exec', 'transaction', 'listen', 'close']) &&
    !hasFunctions(value, ['rollback'])
  ) {
    return undefined;
  }
  return `must be a PGlite instance (\`new PGlite(dir)\`); got ${describeKind(value)}`;
}

/** Why `value` is not a drizzle database on postgres-js or PGlite, or undefined when it is one. */
export function drizzleProblem(value: unknown): string | undefined {
  if (!is(value, PgDatabase)) {
    return `must be a drizzle database (\`drizzle(client)\` of drizzle-orm/postgres-js or /pglite); got ${describeKind(value)}`;
  }
  if (is(value, PgTransaction)) {
    return 'is a drizzle transaction, not a database: give the database (`drizzle(client)`); pass a transaction as `tx` to a start';
  }
  const client = (value as unknown as { $client?: unknown }).$client;
  if (postgresClientProblem(client) === undefined || pgliteProblem(client) === undefined) return undefined;
  return 'must be a drizzle database on the postgres-js or pglite driver (its $client is neither a postgres.js client nor a PGlite instance)';
}

/** Why `value` is not a pino-like logger, or undefined when it is one. */
export function loggerProblem(value: unknown): string | undefined {
  if (typeof value === 'object' && hasFunctions(value, ['info', 'warn', 'error'])) return undefined;
  return `must be a pino logger (an object with info, warn and error methods); got ${describeKind(value)}`;
}
