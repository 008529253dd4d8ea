import type { PGlite } from '@electric-sql/pglite';
import { z } from 'zod';
import { InvalidOptionsError, type Duration } from '@palisade/sdk';
import { durationMs, durationSchema, parseOptions } from '@palisade/sdk/internal';
import type { AnyPgDatabase } from '../db/database.js';
import {
  drizzleProblem,
  loggerProblem,
  pgliteProblem,
  postgresClientProblem,
  type PostgresJsClient,
} from '../db/client-shapes.js';
import { databaseUrlProblem, type DatabaseConnection } from '../db/database-target.js';
import { SCHEMA_NAME } from '../queries/schema-names.js';

/**
 * Where the engine's database is. Give at most one of `databaseUrl`, `sql`, `pglite`, `db` (or `dataDir`).
 *
 * One precedence everywhere (engine, CLI, demo, tests): an explicit option, then the `DATABASE_URL` environment
 * variable, then the embedded database under `.palisade/db`.
 */
export interface EngineOptions {
  /**
   * A PostgreSQL connection string; the engine opens (and closes) its own pools.
   * @defaultValue `process.env.DATABASE_URL` when no other connection option (nor `dataDir`) is given
   */
  readonly databaseUrl?: string;
  /**
   * A postgres.js client the host already has (postgres.js 3.4 or later, including 4.x); the engine never ends
   * it. Typed by the part the engine uses ({@link PostgresJsClient}), so a client of either major version fits.
   * Give it `backoff: reconnectBackoffSeconds` (exported here): postgres.js's default reconnect backoff grows to
   * 20 s per failed connect, and after a database outage of a few seconds the engine's claims, heartbeats and
   * commits on that client would wait out up to 20 s more (the pools the engine opens itself reconnect within
   * half a second).
   */
  readonly sql?: PostgresJsClient;
  /** A PGlite instance the host already has. */
  readonly pglite?: PGlite;
  /** A drizzle instance (postgres.js or PGlite driver) the host already has; its `$client` is used. */
  readonly db?: AnyPgDatabase;
  /**
   * Embedded database directory: a file-backed PGlite, single process (a second process is refused with
   * `EMBEDDED_DATABASE_LOCKED`). Giving it chooses the embedded database even when `DATABASE_URL` is set.
   * `'memory://'` keeps it in memory. @defaultValue `'.palisade/db'` (relative to the working directory), used
   * when no connection option is given and `DATABASE_URL` is not set
   */
  readonly dataDir?: string;
  /**
   * Postgres schema holding the engine's tables; lowercase identifier.
   * @defaultValue the `PALISADE_SCHEMA` environment variable when set (as for the CLI), else `'palisade'`
   */
  readonly schema?: string;
  /** Apply pending migrations when the engine is created. @defaultValue true */
  readonly migrate?: boolean;
  /** Size of the pool the engine opens for `databaseUrl`; 2 to 1,000. @defaultValue 10 */
  readonly poolSize?: number;
  /** Server-side `statement_timeout` of engine connections it opens. @defaultValue 10_000 (ms) */
  readonly statementTimeoutMs?: Duration;
  /** Server-side `lock_timeout` of engine connections it opens. @defaultValue 5_000 (ms) */
  readonly lockTimeoutMs?: Duration;
  /**
   * Retention of finished runs: every worker of this engine deletes, in the background, the runs that ended
   * (`completed`, `failed` or `cancelled`) longer ago than this, judged by the database clock, with their steps,
   * attempts and events, and frees their idempotency keys (see `engine.pruneRuns`). A run that has not ended is
   * never deleted. A duration (ms, or `'30d'`-style), from 1 minute to 100 years. Each worker sweeps when it
   * starts and then once a minute, in batches of 500 runs, apart from its claim loop.
   * @defaultValue undefined: finished runs are kept forever
   */
  readonly retentionMs?: Duration;
}

/** Longest `retentionMs` and `olderThanMs` of pruning: 100 years, in ms (longer than any Node timer: never one). */
export const MAX_RETENTION_MS = 100 * 365 * 86_400_000;

/** Shortest `retentionMs`: a run's outcome must stay readable for a while after it ends (`handle.result()`). */
export const MIN_RETENTION_MS = 60_000;

/** Largest `poolSize`: each connection is a server backend, and PostgreSQL's default max_connections is 100. */
export const MAX_POOL_SIZE = 1_000;

export const ENGINE_DEFAULTS = Object.freeze({
  dataDir: '.palisade/db',
  schema: 'palisade',
  migrate: true,
  poolSize: 10,
  statementTimeoutMs: 10_000,
  lockTimeoutMs: 5_000,
});

/** A zod check of an opaque value (a client, a logger) by a function that says what is wrong with it. */
function shaped(problem: (value: unknown) => string | undefined) {
  return z
    .unknown()
    .superRefine((value, ctx) => {
      const message = problem(value);
      if (message !== undefined) ctx.addIssue({ code: 'custom', message });
    })
    .optional();
}

/** A connection string, checked as the driver will parse it; the message never repeats it (a password). */
const databaseUrlSchema = z.string().superRefine((url, ctx) => {
  const message = databaseUrlProblem(url);
  if (message !== undefined) ctx.addIssue({ code: 'custom', message });
});

const engineSchema = z
  .object({
    databaseUrl: databaseUrlSchema.optional(),
    sql: shaped(postgresClientProblem),
    pglite: shaped(pgliteProblem),
    db: shaped(drizzleProblem),
    logger: shaped(loggerProblem),
    dataDir: z.string().min(1, 'must be a directory path or memory://').optional(),
    schema: z
      .string()
      .regex(SCHEMA_NAME, 'must be a lowercase identifier of at most 40 characters')
      .optional(),
    migrate: z.boolean().optional(),
    poolSize: z
      .number()
      .int('must be a whole number')
      .min(2, 'must be ≥ 2 (one connection is reserved for heartbeats)')
      .max(MAX_POOL_SIZE, `must be ≤ ${MAX_POOL_SIZE} (each connection is a server process)`)
      .optional(),
    statementTimeoutMs: durationMs.pipe(z.number().min(100, 'must be ≥ 100 ms')).optional(),
    lockTimeoutMs: durationMs.pipe(z.number().min(10, 'must be ≥ 10 ms')).optional(),
    retentionMs: durationSchema(MAX_RETENTION_MS)
      .pipe(
        z
          .number()
          .min(MIN_RETENTION_MS, 'must be ≥ 1 minute (a run must stay readable for a while after it ends)'),
      )
      .optional(),
  })
  .strict()
  .superRefine((o, ctx) => {
    const given = (['databaseUrl', 'sql', 'pglite', 'db'] as const).filter((k) => o[k] !== undefined);
    if (given.length > 1) {
      ctx.addIssue({
        code: 'custom',
        path: [given[1] as string],
        message: `give only one of ${given.join(', ')}`,
      });
    }
  });

/** {@link EngineOptions} with defaults filled. */
export interface ResolvedEngineOptions {
  readonly connection: DatabaseConnection;
  readonly schema: string;
  readonly migrate: boolean;
  readonly poolSize: number;
  readonly statementTimeoutMs: number;
  readonly lockTimeoutMs: number;
  /** Age (ms) past which the workers delete finished runs; `null`: kept forever. */
  readonly retentionMs: number | null;
}

/** The environment {@link resolveEngineOptions} reads: `DATABASE_URL` and `PALISADE_SCHEMA`. */
export interface EngineEnvironment {
  readonly DATABASE_URL?: string | undefined;
  readonly PALISADE_SCHEMA?: string | undefined;
}

/**
 * The schema an engine uses: the `schema` option (the CLI's `--schema`), else the `PALISADE_SCHEMA` environment
 * variable when set and not empty, else `'palisade'`. One rule for `createEngine` and the CLI.
 * @returns the name and where it came from (for messages).
 */
export function resolveSchemaName(
  option: string | undefined,
  env: EngineEnvironment = process.env,
): { readonly schema: string; readonly from: 'option' | 'PALISADE_SCHEMA' | 'default' } {
  if (option !== undefined) return { schema: option, from: 'option' };
  if (env.PALISADE_SCHEMA) return { schema: env.PALISADE_SCHEMA, from: 'PALISADE_SCHEMA' };
  return { schema: ENGINE_DEFAULTS.schema, from: 'default' };
}

/**
 * Fill defaults and choose the database: an explicit connection option (or `dataDir`), else `DATABASE_URL` from
 * `env`, else the embedded database; the schema by {@link resolveSchemaName}. Checks every option (and `logger`,
 * which `createEngine` takes) before anything is opened.
 * @throws InvalidOptionsError naming each bad option (or a `DATABASE_URL` / `PALISADE_SCHEMA` that is not
 * usable, naming the variable).
 */
export function resolveEngineOptions(
  options: EngineOptions & { readonly logger?: unknown } = {},
  env: EngineEnvironment = process.env,
): ResolvedEngineOptions {
  const o = parseOptions(engineSchema, options, 'engine options');
  const explicit = (['databaseUrl', 'sql', 'pglite', 'db', 'dataDir'] as const).some(
    (k) => options[k] !== undefined,
  );
  const envUrl = explicit || !env.DATABASE_URL ? undefined : env.DATABASE_URL;
  const envUrlProblem = envUrl === undefined ? undefined : databaseUrlProblem(envUrl);
  if (envUrlProblem !== undefined) {
    throw new InvalidOptionsError('engine options', [
      { path: 'DATABASE_URL', message: `${envUrlProblem} (the environment variable)` },
    ]);
  }
  const schema = resolveSchemaName(o.schema, env);
  if (schema.from === 'PALISADE_SCHEMA' && !SCHEMA_NAME.test(schema.schema)) {
    throw new InvalidOptionsError('engine options', [
      {
        path: 'PALISADE_SCHEMA',
        message: 'must be a lowercase identifier of at most 40 characters (the environment variable)',
      },
    ]);
  }
  const connection: ResolvedEngineOptions['connection'] = o.databaseUrl
    ? { kind: 'url', url: o.databaseUrl, from: 'option' }
    : envUrl !== undefined
      ? { kind: 'url', url: envUrl, from: 'DATABASE_URL' }
      : options.sql
        ? { kind: 'sql', sql: options.sql }
        : options.pglite
          ? { kind: 'pglite', pglite: options.pglite }
          : options.db
            ? { kind: 'drizzle', db: options.db }
            : { kind: 'embedded', dataDir: o.dataDir ?? ENGINE_DEFAULTS.dataDir };
  return Object.freeze({
    connection,
    schema: schema.schema,
    migrate: o.migrate ?? ENGINE_DEFAULTS.migrate,
    poolSize: o.poolSize ?? ENGINE_DEFAULTS.poolSize,
    statementTimeoutMs: o.statementTimeoutMs ?? ENGINE_DEFAULTS.statementTimeoutMs,
    lockTimeoutMs: o.lockTimeoutMs ?? ENGINE_DEFAULTS.lockTimeoutMs,
    retentionMs: o.retentionMs ?? null,
  });
}
