import { PGlite } from '@electric-sql/pglite';
import postgres, { type Sql } from '../vendor/postgres/index.js';
import { pino, type Logger } from 'pino';
import { PalisadeError } from '@palisade/sdk';
import { Client } from './client/client.js';
import { fromPglite, fromPostgres, poolReconnectBackoffSeconds, type Database } from './db/database.js';
import { connectionFailure, describeConnection } from './db/database-target.js';
import { pgliteProblem, postgresClientProblem } from './db/client-shapes.js';
import { engineIdentity } from './db/caller-transaction.js';
import { openEmbeddedDatabase } from './db/embedded-database.js';
import { NotificationHub } from './db/notification-hub.js';
import { migrate, type MigrateResult } from './migrate.js';
import {
  resolveEngineOptions,
  resolvePruneOptions,
  resolveStopOptions,
  type EngineOptions,
  type PruneOptions,
  type ResolvedEngineOptions,
} from './options.js';
import { countPrunableRuns } from './queries/prune-runs.js';
import { pruneFinishedRuns, type PruneResult } from './retention.js';
import { schemaNames, type SchemaNames } from './queries/schema-names.js';
import { Schedules } from './schedules/schedules.js';
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
  /**
   * Durable schedules on this schema: create, update, pause, resume, trigger, backfill, delete, list. Their ticks
   * are fired by the workers of any engine on the schema (`WorkerOptions.schedules`, on by default).
   */
  readonly schedules: Schedules;
  readonly schema: string;
  readonly options: ResolvedEngineOptions;
  /** The engine's database handle (advanced use: tests, the CLI). */
  readonly database: Database;
  readonly names: SchemaNames;
  readonly logger: Logger;
  /** A worker serving the given activities; call `start()` on it. */
  worker(options: WorkerOptions): Worker;
  /**
   * Delete the runs that ended (`completed`, `failed` or `cancelled`) longer ago than `olderThanMs`, judged by the
   * database clock, with their steps, attempts and events, in batches of 500 runs per statement, until none is
   * left; their idempotency keys are free again (a later start with one creates a new run). A run that has not
   * ended is never deleted, nor one whose turn or a step an attempt may still hold (a lease that has not run
   * out), nor a run other runs name as their parent while they remain. With `dryRun`, counts instead and deletes
   * nothing. Legal at any time, beside running workers (it skips runs they hold). `palisade runs prune` calls it;
   * `createEngine({ retentionMs })` has every worker do it in the background.
   * @returns how many runs, steps, attempts and events were (or would be) deleted.
   * @throws InvalidOptionsError naming a bad `olderThanMs` (not a duration such as `'30d'`, or over 100 years).
   * @throws PalisadeError `ENGINE_CLOSED` after `close()`.
   */
  pruneRuns(options: PruneOptions): Promise<PruneResult>;
  /** Apply pending migrations (done at creation unless `migrate: false`). */
  migrate(): Promise<MigrateResult>;
  /**
   * Stop every worker this engine made (with `stopOptions`), stop listening and close the connections the engine
   * opened (never a client the caller passed in). Leaves no timers, listeners or connections behind.
   */
  close(stopOptions?: StopOptions): Promise<void>;
}

/** Longest message (and stack) a logged error keeps: drizzle puts the whole SQL text and its params there. */
const LOGGED_ERROR_CHARS = 400;

function cut(text: string | undefined): string | undefined {
  if (text === undefined || text.length <= LOGGED_ERROR_CHARS) return text;
  return `${text.slice(0, LOGGED_ERROR_CHARS)}… (${text.length - LOGGED_ERROR_CHARS} more characters)`;
}

/** pino's error serializer with the message and stack (and the cause's) cut to a few hundred characters. */
function shortErrorSerializer(error: Error): Record<string, unknown> {
  const out = pino.stdSerializers.err(error) as unknown as Record<string, unknown>;
  const shorten = (o: Record<string, unknown>) => {
    for (const key of ['message', 'stack']) {
      if (typeof o[key] === 'string') o[key] = cut(o[key]);
    }
  };
  shorten(out);
  if (out.cause && typeof out.cause === 'object') shorten(out.cause as Record<string, unknown>);
  return out;
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
      try {
        // One round trip first, so that a server that is down, a database that does not exist or refused
        // credentials fail here with their own code, naming host and database, not as a driver error deep
        // inside the first migration.
        await client`SELECT 1`;
      } catch (error) {
        await client.end({ timeout: 0 });
        throw (
          connectionFailure(error, c.url, c.from === 'DATABASE_URL' ? 'DATABASE_URL' : 'databaseUrl') ?? error
        );
      }
      return fromPostgres(client, true);
    }
    case 'sql':
      // A 3.x or 4.x client, checked by shape (db/client-shapes.ts); the engine uses only what both have.
      return fromPostgres(c.sql as unknown as Sql, false);
    case 'pglite':
      return fromPglite(c.pglite, false);
    case 'drizzle': {
      const client = (c.db as unknown as { $client?: unknown }).$client;
      if (pgliteProblem(client) === undefined) return fromPglite(client as PGlite, false);
      if (postgresClientProblem(client) === undefined) return fromPostgres(client as Sql, false);
      throw new PalisadeError(
        'INVALID_OPTIONS',
        'engine options: db must be a drizzle instance on the postgres-js or pglite driver (its $client was neither)',
      );
    }
    case 'embedded': {
      if (c.dataDir === 'memory://') return fromPglite(new PGlite(), true);
      // Refuses a directory another live process holds before PGlite reads a byte of it (db/embedded-lock.ts).
      const embedded = await openEmbeddedDatabase(c.dataDir);
      let database: Database;
      try {
        database = await fromPglite(embedded.pglite, false);
      } catch (error) {
        await embedded.close();
        throw error;
      }
      const close = database.close.bind(database);
      return Object.assign(database, {
        close: async () => {
          try {
            await close();
          } finally {
            await embedded.close();
          }
        },
      });
    }
  }
}

/**
 * Open (and by default migrate) an engine.
 *
 * Which database: an explicit `databaseUrl`, `sql` (postgres.js), `pglite`, `db` (drizzle) or `dataDir`; else the
 * PostgreSQL server of the `DATABASE_URL` environment variable; else the embedded database, a file-backed PGlite
 * under `.palisade/db` (zero setup, one process). Several processes or machines need PostgreSQL (`palisade dev`
 * starts a local one). The engine logs which database it uses (at level info: `engine:database`), never a
 * password.
 * @throws InvalidOptionsError naming the bad option; PalisadeError `SCHEMA_TOO_NEW` when a newer Palisade
 * migrated the schema.
 * @throws PalisadeError `DATABASE_UNAVAILABLE`, `DATABASE_NOT_FOUND` or `DATABASE_AUTH_FAILED` (naming host and
 * database) when the server of a URL cannot be used.
 * @throws PalisadeError `EMBEDDED_DATABASE_LOCKED` naming the pid of the live process that holds the embedded
 * directory.
 */
export async function createEngine(options: CreateEngineOptions = {}): Promise<Engine> {
  // Every option, the logger included, is checked before anything is opened: a misuse opens no connection.
  const resolved = resolveEngineOptions(options);
  const logger =
    options.logger ??
    pino(
      { level: process.env.PALISADE_LOG_LEVEL ?? 'warn', serializers: { err: shortErrorSerializer } },
      pino.destination({ dest: 2, sync: true }),
    );
  const target = describeConnection(resolved.connection);
  const database = await openDatabase(resolved);
  // From here on the engine holds what it opened: whatever fails closes it before the error reaches the caller.
  try {
    return await assembleEngine(resolved, database, logger, target);
  } catch (error) {
    await database.close().catch(() => undefined);
    throw error;
  }
}

async function assembleEngine(
  resolved: ResolvedEngineOptions,
  database: Database,
  logger: Logger,
  target: ReturnType<typeof describeConnection>,
): Promise<Engine> {
  logger.info(
    {
      event: 'engine:database',
      database: target.kind,
      at: target.where,
      from: target.from,
      schema: resolved.schema,
    },
    `palisade: using ${target.kind === 'embedded' ? 'the embedded database at' : target.kind} ${target.where} ` +
      `(${target.from}), schema ${resolved.schema}`,
  );
  const names = schemaNames(resolved.schema);
  if (resolved.migrate) await migrate(database, resolved.schema);
  // Which database this is, for the check of a caller's transaction (`{ tx }`). On PGlite it is read now, while
  // no caller's transaction holds its one connection (a failure here only leaves that check out); on PostgreSQL
  // at the first such start, on another connection of the pool.
  if (database.driver === 'pglite') await engineIdentity(database).catch(() => undefined);
  const hub = new NotificationHub(database, names.channel);
  const workers = new Set<Worker>();
  const client = new Client(database, names, hub, logger, (workflowName, queue) => {
    for (const w of workers) {
      const host = w.reserveEagerStart(workflowName, queue);
      if (host) return host;
    }
    return undefined;
  });
  let closed = false;
  return {
    client,
    schedules: new Schedules(database, names, () => closed),
    schema: resolved.schema,
    options: resolved,
    database,
    names,
    logger,
    worker(workerOptions: WorkerOptions): Worker {
      if (closed)
        throw new PalisadeError('ENGINE_CLOSED', 'engine is closed; create a new one to start workers');
      const worker = new Worker(
        {
          db: database,
          names,
          logger,
          retentionMs: resolved.retentionMs,
          results: hub,
        },
        workerOptions,
      );
      workers.add(worker);
      return worker;
    },
    async pruneRuns(pruneOptions: PruneOptions): Promise<PruneResult> {
      const { olderThanMs, dryRun } = resolvePruneOptions(pruneOptions);
      if (closed)
        throw new PalisadeError('ENGINE_CLOSED', 'engine is closed; create a new one to prune runs');
      const counts = dryRun
        ? await countPrunableRuns(database, names, { olderThanMs })
        : await pruneFinishedRuns(database, names, { olderThanMs, untilEmpty: true });
      return { ...counts, olderThanMs, dryRun };
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
