/**
 * The object store's manifest lives in PostgreSQL, on whichever database the demo runs: a real server or the
 * embedded PGlite, each fenced by the engine's `createFencedResource`.
 */
import type { PGlite, Transaction } from '@electric-sql/pglite';
import postgres from '@palisade/engine/postgres';
import { createFencedResource, type FencingToken } from '@palisade/engine';

/** Runs one parameterized statement and returns its rows. */
export interface StoreQuery {
  query<T>(text: string, params?: readonly unknown[]): Promise<T[]>;
}

/** The manifest's database, whatever the driver. */
export interface StoreDatabase extends StoreQuery {
  readonly driver: 'postgres' | 'pglite';
  /** Schema holding the store's tables (`fences`, `objects`, `refusals`). */
  readonly schema: string;
  /** Create the schema and the fences table if absent (the store adds its own tables). */
  install(): Promise<void>;
  /**
   * Run `write(tx)` in one transaction that first checks and raises the fence of `fencing.scope`: it commits only
   * if `fencing.token` is at least the highest token accepted for that scope so far.
   * @throws LeaseLostError (operation `fenced-resource`) with the stale and the current token; nothing is written.
   */
  fencedWrite<T>(fencing: FencingToken, write: (tx: StoreQuery) => Promise<T>): Promise<T>;
  /** Close what this handle opened. */
  close(): Promise<void>;
}

/** `"name"` quoted as a SQL identifier. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * The manifest on a real PostgreSQL server, through its own small pool (the store is a service of its own, not
 * part of any worker). The fence is the engine's `createFencedResource` on the store's schema.
 */
export function postgresStoreDatabase(databaseUrl: string, schema: string): StoreDatabase {
  const sql = postgres(databaseUrl, {
    max: 4,
    onnotice: () => undefined,
    connection: { application_name: 'transcoding-object-store' },
  });
  const fences = createFencedResource({ sql, schema });
  const runner = (client: postgres.Sql | postgres.TransactionSql): StoreQuery => ({
    async query<T>(text: string, params: readonly unknown[] = []) {
      const rows = await client.unsafe(text, [...params] as postgres.ParameterOrJSON<never>[]);
      return [...rows] as T[];
    },
  });
  return {
    driver: 'postgres',
    schema,
    ...runner(sql),
    install: () => fences.install(),
    fencedWrite: (fencing, write) => fences.write(fencing, (tx) => write(runner(tx))),
    close: () => sql.end({ timeout: 5 }),
  };
}

/**
 * The manifest on the embedded PGlite (the engine's own instance; PGlite is one connection, so nothing is opened
 * or closed here). The fence is the engine's `createFencedResource` on the same instance.
 */
export function pgliteStoreDatabase(pglite: PGlite, schema: string): StoreDatabase {
  const fences = createFencedResource({ pglite, schema });
  const runner = (client: PGlite | Transaction): StoreQuery => ({
    async query<T>(text: string, params: readonly unknown[] = []) {
      return (await client.query<T>(text, [...params])).rows;
    },
  });
  return {
    driver: 'pglite',
    schema,
    ...runner(pglite),
    install: () => fences.install(),
    fencedWrite: (fencing, write) => fences.write(fencing, (tx) => write(runner(tx))),
    close: () => Promise.resolve(),
  };
}
