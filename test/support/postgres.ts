/**
 * Per-test-file databases on the server the globalSetup provides (./global-setup.ts).
 *
 *   const databaseUrl = useTestDatabase();
 *   it('…', async () => { const sql = postgres(databaseUrl()); … });
 */
import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, inject } from 'vitest';
import { quoteIdent } from './quote-ident.js';

export interface TestDatabase {
  /** Connection URL of the new, empty database. */
  readonly url: string;
  /** The database's name. */
  readonly name: string;
  /** Drops the database, terminating any connections still open to it. Idempotent. */
  drop(): Promise<void>;
}

const MAX_IDENTIFIER_BYTES = 63;

/** The superuser URL of the test server (only inside vitest workers). */
export function adminUrl(): string {
  return inject('postgresAdminUrl');
}

/**
 * Creates a fresh, uniquely named database on the test server. `name` only makes the database name
 * recognisable (it is lowercased, reduced to [a-z0-9_] and shortened); uniqueness comes from a suffix.
 */
export async function createTestDatabase(name = 'test'): Promise<TestDatabase> {
  const admin = adminUrl();
  const prefix = inject('postgresDatabasePrefix');
  const suffix = `_${randomBytes(4).toString('hex')}`;
  const slug =
    name
      .toLowerCase()
      .replace(/[^a-z0-9_]+/g, '_')
      .replace(/^_+|_+$/g, '')
      .slice(0, MAX_IDENTIFIER_BYTES - prefix.length - suffix.length) || 'test';
  const dbName = `${prefix}${slug}${suffix}`;

  await withAdmin(admin, (sql) => sql.unsafe(`create database ${quoteIdent(dbName)}`));

  let dropped: Promise<void> | undefined;
  return {
    url: withDatabase(admin, dbName),
    name: dbName,
    drop: () =>
      (dropped ??= withAdmin(admin, async (sql) => {
        await sql.unsafe(`drop database if exists ${quoteIdent(dbName)} with (force)`);
      })),
  };
}

/**
 * Registers beforeAll/afterAll hooks that create a database for the calling test file (or describe
 * block) and drop it afterwards. Returns a getter for its URL, usable in tests and later hooks.
 */
export function useTestDatabase(name?: string): () => string {
  let database: TestDatabase | undefined;
  // vitest parses hook parameters: the (unused) context must be written as a destructuring pattern.
  // eslint-disable-next-line no-empty-pattern
  beforeAll(async ({}, suite) => {
    database = await createTestDatabase(name ?? basename(suite.file.filepath).replace(/\.test\.ts$/, ''));
  });
  afterAll(async () => {
    await database?.drop();
    database = undefined;
  });
  return () => {
    if (database === undefined) {
      throw new Error('useTestDatabase(): the database exists only between its beforeAll and afterAll hooks');
    }
    return database.url;
  };
}

async function withAdmin<T>(url: string, fn: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(url, { max: 1, onnotice: () => undefined });
  try {
    return await fn(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** The same server and credentials, another database. */
function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${encodeURIComponent(database)}`;
  return parsed.toString();
}
