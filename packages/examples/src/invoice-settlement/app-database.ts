import type { PGlite } from '@electric-sql/pglite';
import { sql } from 'drizzle-orm';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import postgres from '@palisade/engine/postgres';
import type { AnyPgDatabase } from '@palisade/engine';

/**
 * A plain connection to the demo's database, for what is not an activity: creating tables, the payment provider's
 * own storage, and reading everything back for the checks. Activities write only through `ctx.fencedTransaction`.
 */
export interface AppDatabase {
  readonly driver: 'postgres' | 'pglite';
  readonly db: AnyPgDatabase;
  /** Run statements one by one, in order (DDL). */
  run(statements: readonly string[]): Promise<void>;
  close(): Promise<void>;
}

/** A small postgres.js pool on `databaseUrl`, ended by `close()`. */
export function postgresAppDatabase(databaseUrl: string, applicationName: string): AppDatabase {
  const client = postgres(databaseUrl, {
    max: 4,
    onnotice: () => undefined,
    connection: { application_name: applicationName },
  });
  const db = drizzlePostgres(client) as unknown as AnyPgDatabase;
  return {
    driver: 'postgres',
    db,
    async run(statements) {
      for (const statement of statements) await db.execute(sql.raw(statement));
    },
    close: () => client.end({ timeout: 5 }),
  };
}

/** The embedded PGlite instance the engine also uses (one process, one instance); `close()` leaves it open. */
export function pgliteAppDatabase(pglite: PGlite): AppDatabase {
  const db = drizzlePglite(pglite) as unknown as AnyPgDatabase;
  return {
    driver: 'pglite',
    db,
    async run(statements) {
      for (const statement of statements) await db.execute(sql.raw(statement));
    },
    close: () => Promise.resolve(),
  };
}
