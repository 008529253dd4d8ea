/**
 * Engines for tests, on either driver:
 *
 *   const target = useEngineTarget('postgres');        // or 'pglite'
 *   it('…', async () => { const engine = await target.engine(); … });   // closed after the test
 *
 * Each call of `engine()` gets its own Postgres schema on the file's database (postgres) or its own
 * in-memory PGlite (pglite), so tests in one file do not see each other's rows.
 */
import { randomBytes } from 'node:crypto';
import postgres from '@palisade/engine/postgres';
import type { PGlite } from '@electric-sql/pglite';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { createEngine, type CreateEngineOptions, type Engine } from '@palisade/engine';
import { testPglite } from './pglite.js';
import { useTestDatabase } from './postgres.js';

export type Driver = 'postgres' | 'pglite';

export interface EngineTarget {
  readonly driver: Driver;
  /** The file's database URL (postgres driver only). */
  url(): string;
  /** A fresh, migrated engine on its own schema; closed automatically after the current test. */
  engine(options?: Omit<CreateEngineOptions, 'databaseUrl' | 'pglite' | 'sql' | 'db'>): Promise<Engine>;
  /** A postgres.js admin client on the file's database (postgres driver only); ended after the test. */
  sql(): postgres.Sql;
  /** The file's PGlite instance, shared by its engines (pglite driver only; after the first `engine()`). */
  pglite(): PGlite;
}

/**
 * Register per-file database hooks for `driver` and return a factory of engines. `warm`: start the file's PGlite
 * (and migrate one schema) in a `beforeAll` hook, since the first PGlite of a process takes seconds to start,
 * which would otherwise be charged to whichever test comes first; that engine is closed after the first test, like
 * any other. No effect on the postgres driver. Default false.
 */
export function useEngineTarget(driver: Driver, { warm = false }: { warm?: boolean } = {}): EngineTarget {
  const url = driver === 'postgres' ? useTestDatabase() : () => '';
  const open: Engine[] = [];
  const clients: postgres.Sql[] = [];
  // One in-memory PGlite per file (starting one takes seconds); each engine still gets its own schema.
  let pglite: PGlite | undefined;
  afterAll(async () => {
    await pglite?.close();
    pglite = undefined;
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((e) => e.close({ graceMs: 0 })));
    await Promise.all(clients.splice(0).map((c) => c.end({ timeout: 1 })));
  });
  const target: EngineTarget = {
    driver,
    url,
    async engine(options = {}) {
      const schema = options.schema ?? `t_${randomBytes(5).toString('hex')}`;
      const engine =
        driver === 'postgres'
          ? await createEngine({ ...options, schema, databaseUrl: url() })
          : await createEngine({ ...options, schema, pglite: (pglite ??= testPglite()) });
      open.push(engine);
      return engine;
    },
    pglite() {
      if (!pglite) throw new Error('pglite() is only for the pglite driver, after engine()');
      return pglite;
    },
    sql() {
      if (driver !== 'postgres') throw new Error('sql() is only for the postgres driver');
      const client = postgres(url(), { max: 4, onnotice: () => undefined });
      clients.push(client);
      return client;
    },
  };
  if (warm && driver === 'pglite') {
    beforeAll(async () => {
      await target.engine();
    });
  }
  return target;
}

/** Resolve with the first event `name` emitted by `emitter` that satisfies `predicate`; reject after `timeoutMs`. */
export function nextEvent<T>(
  emitter: {
    on(name: string, fn: (arg: T) => void): unknown;
    off(name: string, fn: (arg: T) => void): unknown;
  },
  name: string,
  predicate: (arg: T) => boolean = () => true,
  timeoutMs = 20_000,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      emitter.off(name, handler);
      reject(new Error(`no ${name} event within ${timeoutMs} ms`));
    }, timeoutMs);
    function handler(arg: T): void {
      if (!predicate(arg)) return;
      clearTimeout(timer);
      emitter.off(name, handler);
      resolve(arg);
    }
    emitter.on(name, handler);
  });
}
