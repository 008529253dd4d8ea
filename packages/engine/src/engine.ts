import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import postgres, { type Sql } from 'postgres';
import { pino, type Logger } from 'pino';
import { PalisadeError } from '@palisade/sdk';
import { Client } from './client/client.js';
import { fromPglite, fromPostgres, poolReconnectBackoffSeconds, type Database } from './db/database.js';
import { NotificationHub } from './db/notification-hub.js';
import { migrate, type MigrateResult } from './migrate.js';
import {
  resolveEngineOptions,
  resolveStopOptions,
  type EngineOptions,
  type ResolvedEngineOptions,
} from './options.js';
import { schemaNames, type SchemaNames } from './queries/schema-names.js';
import { Worker, type StopOptions } from './worker/worker.js';
import type { WorkerOptions } from './options.js';

/** Options of {@link createEngine}: where the database is, plus an optional pino logger. */
export interface CreateEngineOptions extends EngineOptions {
  /** @defaultValue pino at level `PALISADE_LOG_LEVEL` or `warn`, to stderr */
  readonly logger?: Logger;
}

/**
 * One engine on one database schema: the client that starts and inspects work, and a factory of workers.
 * Holds no global state; several engines (on several schemas or databases) can live in one process.
 */
export interface Engine {
  readonly client: Client;
  readonly schema: string;
  readonly options: ResolvedEngineOptions;
  /** The engine's database handle (advanced use: tests, the CLI). */
  readonly database: Database;
  readonly names: SchemaNames;
  readonly logger: Logger;
  /** A worker serving the given activities; call `start()` on it. */
  worker(options: WorkerOptions): Worker;
  /** Apply pending migrations (done at creation unless `migrate: false`). */
  migrate(): Promise<MigrateResult>;
  /**
   * Stop every worker this engine made (with `stopOptions`), stop listening and close the connections the engine
   * opened (never a client the caller passed in). Leaves no timers, listeners or connections behind.
   */
  close(stopOptions?: StopOptions): Promise<void>;
}

async function openDatabase(options: ResolvedEngineOptions): Promise<Database> {
  const c = options.connection;
  switch (c.kind) {
    case 'url': {
      const client: Sql = postgres(c.url, {
        max: options.poolSize,
        onnotice: () => undefined,
        backoff: poolReconnectBackoffSeconds,
        connection: {
          application_name: 'palisade',
          statement_timeout: options.statementTimeoutMs,
          lock_timeout: options.lockTimeoutMs,
        },
      });
      return fromPostgres(client, true);
    }
    case 'sql':
      return fromPostgres(c.sql, false);
    case 'pglite':
      return fromPglite(c.pglite, false);
    case 'drizzle': {
      const client = (c.db as unknown as { $client?: unknown }).$client;
      if (client instanceof PGlite) return fromPglite(client, false);
      if (typeof client === 'function') return fromPostgres(client as Sql, false);
      throw new PalisadeError(
        'INVALID_OPTIONS',
        'engine options: db must be a drizzle instance on the postgres-js or pglite driver (its $client was neither)',
      );
    }
    case 'embedded': {
      if (c.dataDir === 'memory://') return fromPglite(new PGlite(), true);
      await mkdir(c.dataDir, { recursive: true });
      return fromPglite(new PGlite(c.dataDir), true);
    }
  }
}

/**
 * Open (and by default migrate) an engine.
 *
 * With no options it uses the embedded database: a file-backed PGlite under `.palisade/db`, zero setup, one
 * process. Give `databaseUrl`, `sql` (postgres.js), `pglite` or `db` (drizzle) for anything else; several
 * processes or machines need a real PostgreSQL.
 * @throws InvalidOptionsError naming the bad option; PalisadeError `SCHEMA_TOO_NEW` when a newer Palisade
 * migrated the schema.
 */
export async function createEngine(options: CreateEngineOptions = {}): Promise<Engine> {
  const { logger: givenLogger, ...engineOptions } = options;
  const resolved = resolveEngineOptions(engineOptions);
  const logger =
    givenLogger ??
    pino({ level: process.env.PALISADE_LOG_LEVEL ?? 'warn' }, pino.destination({ dest: 2, sync: true }));
  const database = await openDatabase(resolved);
  const names = schemaNames(resolved.schema);
  try {
    if (resolved.migrate) await migrate(database, resolved.schema);
  } catch (error) {
    await database.close();
    throw error;
  }
  const hub = new NotificationHub(database, names.channel);
  const client = new Client(database, names, hub, logger);
  const workers = new Set<Worker>();
  let closed = false;
  return {
    client,
    schema: resolved.schema,
    options: resolved,
    database,
    names,
    logger,
    worker(workerOptions: WorkerOptions): Worker {
      if (closed)
        throw new PalisadeError('ENGINE_CLOSED', 'engine is closed; create a new one to start workers');
      const worker = new Worker({ db: database, names, logger }, workerOptions);
      workers.add(worker);
      return worker;
    },
    migrate: () => migrate(database, resolved.schema),
    async close(stopOptions?: StopOptions): Promise<void> {
      resolveStopOptions(stopOptions); // refuse a bad graceMs before anything is stopped
      if (closed) return;
      closed = true;
      await Promise.all([...workers].map((w) => w.stop(stopOptions)));
      await hub.close();
      await database.close();
    },
  };
}
