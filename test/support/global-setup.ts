/**
 * vitest globalSetup: one PostgreSQL server for the whole run (DATABASE_URL, or an embedded one that is
 * started here and removed at teardown). Test files get their own databases on it, see ./postgres.ts.
 */
import { randomBytes } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from '@palisade/engine/postgres';
import type { TestProject } from 'vitest/node';
import { writePgliteTemplate } from './pglite.js';
import { startPostgresServer } from './server.js';
import { quoteIdent } from './quote-ident.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Superuser URL of the test server; its database may be used for CREATE/DROP DATABASE. */
    postgresAdminUrl: string;
    /** Prefix of every database created in this run (so teardown can drop leftovers). */
    postgresDatabasePrefix: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Short and lowercase: database names are limited to 63 bytes and are case-folded when unquoted.
  const prefix = `pal_${randomBytes(4).toString('hex')}_`;
  // The PGlite data directory every test file's PGlite starts from (./pglite.ts), made while the server starts.
  const pgliteTemplate = join(tmpdir(), `palisade-test-${prefix}pglite.tar`);
  const [server] = await Promise.all([startPostgresServer(), writePgliteTemplate(pgliteTemplate)]);
  project.provide('postgresAdminUrl', server.adminUrl);
  project.provide('postgresDatabasePrefix', prefix);
  project.provide('pgliteTemplatePath', pgliteTemplate);

  return async () => {
    await rm(pgliteTemplate, { force: true });
    try {
      // On a shared DATABASE_URL server, drop what crashed or forgetful test files left behind.
      if (!server.embedded) await dropDatabasesWithPrefix(server.adminUrl, prefix);
    } finally {
      await server.stop();
    }
  };
}

async function dropDatabasesWithPrefix(adminUrl: string, prefix: string): Promise<void> {
  const sql = postgres(adminUrl, { max: 1, onnotice: () => undefined });
  try {
    const rows = await sql<{ datname: string }[]>`
      select datname from pg_database where starts_with(datname, ${prefix})`;
    for (const { datname } of rows) {
      await sql.unsafe(`drop database if exists ${quoteIdent(datname)} with (force)`);
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}
