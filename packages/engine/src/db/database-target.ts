/**
 * Naming the database an engine uses, for its start-up log and its connection errors, without ever showing a
 * password; and turning a failed first connection into a PalisadeError with its own code.
 * @module
 */
import { resolve } from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import { PalisadeError, type PalisadeErrorCode } from '@palisade/sdk';
import { codesOf } from '../infra-retry.js';
import type { PostgresJsClient } from './client-shapes.js';
import type { AnyPgDatabase } from './database.js';

/**
 * The database an engine was given, as its options resolve it (`ResolvedEngineOptions['connection']`): a
 * connection string (from the `databaseUrl` option or the `DATABASE_URL` environment variable), a postgres.js
 * client, a PGlite instance, a drizzle instance, or the embedded database's data directory.
 */
export type DatabaseConnection =
  | { readonly kind: 'url'; readonly url: string; readonly from: 'option' | 'DATABASE_URL' }
  | { readonly kind: 'sql'; readonly sql: PostgresJsClient }
  | { readonly kind: 'pglite'; readonly pglite: PGlite }
  | { readonly kind: 'drizzle'; readonly db: AnyPgDatabase }
  | { readonly kind: 'embedded'; readonly dataDir: string };

/** A PostgreSQL server and database as a URL names them (no password). */
export interface ServerTarget {
  readonly host: string;
  readonly port: string;
  readonly database: string;
  readonly user: string;
}

/** Host, port, database and user of a `postgres://` URL (libpq defaults for what it leaves out). */
export function serverTarget(url: string): ServerTarget {
  try {
    const u = new URL(url);
    const user = decodeURIComponent(u.username) || process.env.PGUSER || 'postgres';
    return {
      host: u.hostname || process.env.PGHOST || 'localhost',
      port: u.port || '5432',
      database: decodeURIComponent(u.pathname.replace(/^\//, '')) || user,
      user,
    };
  } catch {
    return { host: '(unparsable URL)', port: '', database: '', user: '' };
  }
}

/**
 * Why `url` cannot be a PostgreSQL connection string, or undefined when it can: parsed as postgres.js parses it
 * (several `host:port` separated by commas allowed), so that an out-of-range port or a bad percent-encoding is
 * refused with a message rather than a `TypeError`/`URIError` from the driver. The message never repeats the URL
 * (it may hold a password).
 */
export function databaseUrlProblem(url: string): string | undefined {
  if (!/^postgres(ql)?:\/\//.test(url)) return 'must start with postgres:// or postgresql://';
  const authority = url.slice(url.indexOf('://') + 3).split(/[?/]/)[0] ?? '';
  const hosts = authority.slice(authority.lastIndexOf('@') + 1);
  const badEncoding =
    'has a bad percent-encoding (a % not followed by two hex digits) in its user, password or host: ' +
    'write a literal % as %25';
  try {
    decodeURIComponent(authority);
  } catch {
    return badEncoding;
  }
  for (const host of hosts.split(',')) {
    const port = /:(\d*)$/.exec(host.replace(/^\[[^\]]*\]/, ''))?.[1];
    if (port !== undefined && port !== '' && !(Number(port) >= 1 && Number(port) <= 65_535)) {
      return `has port ${port} out of range: a port is 1 to 65535`;
    }
  }
  try {
    const first = hosts.split(',')[0] ?? '';
    new URL(hosts.includes(',') ? url.replace(hosts, first) : url);
  } catch {
    return 'is not a valid URL: postgres://user:password@host:port/database, with reserved characters of the user and password percent-encoded';
  }
  return undefined;
}

/** `host:port/database`, e.g. `127.0.0.1:5432/app`. */
export function formatServer(t: ServerTarget): string {
  return `${t.host}${t.port ? `:${t.port}` : ''}/${t.database}`;
}

/** What the start-up log says about the database: where it is and why this one (never a password). */
export function describeConnection(c: DatabaseConnection): {
  readonly kind: string;
  readonly where: string;
  readonly from: string;
} {
  switch (c.kind) {
    case 'url':
      return {
        kind: 'postgres',
        where: formatServer(serverTarget(c.url)),
        from: c.from === 'DATABASE_URL' ? 'DATABASE_URL' : 'databaseUrl option',
      };
    case 'sql':
      return { kind: 'postgres', where: 'the postgres.js client given as `sql`', from: 'sql option' };
    case 'pglite':
      return { kind: 'pglite', where: 'the PGlite instance given as `pglite`', from: 'pglite option' };
    case 'drizzle':
      return { kind: 'drizzle', where: 'the drizzle instance given as `db`', from: 'db option' };
    case 'embedded':
      return {
        kind: 'embedded',
        where: c.dataDir === 'memory://' ? 'memory://' : resolve(c.dataDir),
        from: 'embedded (no connection option, DATABASE_URL not set)',
      };
  }
}

const UNREACHABLE = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNRESET',
  'CONNECT_TIMEOUT',
]);

/**
 * A PalisadeError for a first connection that failed because the server is unreachable
 * (`DATABASE_UNAVAILABLE`), the database does not exist (`DATABASE_NOT_FOUND`, SQLSTATE 3D000) or the server
 * refused the credentials (`DATABASE_AUTH_FAILED`, SQLSTATE 28P01 / 28000); undefined for anything else.
 * Classified by code, never by message text. The message names host and database and says what to do.
 */
export function connectionFailure(error: unknown, url: string, from: string): PalisadeError | undefined {
  const t = serverTarget(url);
  const where = `${formatServer(t)} (from ${from})`;
  const codes = codesOf(error);
  const fail = (code: PalisadeErrorCode, message: string) =>
    new PalisadeError(code, message, { cause: error });
  if (codes.includes('3D000')) {
    return fail(
      'DATABASE_NOT_FOUND',
      `database "${t.database}" does not exist on ${t.host}:${t.port} (${where}). Create it ` +
        `(\`createdb -h ${t.host} -p ${t.port} -U ${t.user} ${t.database}\`) or point the URL at an existing one.`,
    );
  }
  if (codes.includes('28P01') || codes.includes('28000')) {
    return fail(
      'DATABASE_AUTH_FAILED',
      `${t.host}:${t.port} refused the credentials of user "${t.user}" for database "${t.database}" (${where}). ` +
        "Check the user and password in the URL and the server's pg_hba.conf.",
    );
  }
  const socket = codes.find((c) => UNREACHABLE.has(c));
  if (socket !== undefined) {
    return fail(
      'DATABASE_UNAVAILABLE',
      `cannot reach PostgreSQL at ${t.host}:${t.port} for database "${t.database}" (${where}): ${socket}. ` +
        'Start the server (or `palisade dev` for a local one), or fix the host and port in the URL.',
    );
  }
  return undefined;
}
