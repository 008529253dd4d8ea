import type { PGlite } from '@electric-sql/pglite';
import { z } from 'zod';
import {
  InvalidOptionsError,
  textProblem,
  durationMs,
  durationSchema,
  formatIssues,
  type ActivityDefinition,
  type Duration,
  type WorkflowDefinition,
  definitionProblem,
} from '@palisade/sdk';
import type { AnyPgDatabase } from './db/database.js';
import {
  drizzleProblem,
  loggerProblem,
  pgliteProblem,
  postgresClientProblem,
  type PostgresJsClient,
} from './db/client-shapes.js';
import { databaseUrlProblem, type DatabaseConnection } from './db/database-target.js';
import { MIN_LEASE_MS, MIN_TEST_LEASE_MS, allowsUnsafeTimings } from './internal/unsafe-timings.js';
import { SCHEMA_NAME } from './queries/schema-names.js';

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
  readonly retention?: Duration;
}

/** Longest `retention` and `olderThan` of pruning: 100 years, in ms (longer than any Node timer: never one). */
export const MAX_RETENTION_MS = 100 * 365 * 86_400_000;

/** Shortest `retention`: a run's outcome must stay readable for a while after it ends (`handle.result()`). */
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
    retention: durationSchema(MAX_RETENTION_MS)
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
  const parsed = engineSchema.safeParse(options);
  if (!parsed.success) throw new InvalidOptionsError('engine options', formatIssues(parsed.error.issues));
  const o = parsed.data;
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
    retentionMs: o.retention ?? null,
  });
}

/** Options of `engine.pruneRuns(...)` and `palisade runs prune`. */
export interface PruneOptions {
  /**
   * Delete the runs that ended longer ago than this, by the database clock: a duration (ms, or `'30d'`-style),
   * from 0 to 100 years. Required.
   */
  readonly olderThan: Duration;
  /** Count what would be deleted, delete nothing. @defaultValue false */
  readonly dryRun?: boolean;
}

/** {@link PruneOptions} checked, the age in ms. */
export interface ResolvedPruneOptions {
  readonly olderThanMs: number;
  readonly dryRun: boolean;
}

const pruneSchema = z
  .object({
    olderThan: durationSchema(MAX_RETENTION_MS),
    dryRun: z.boolean().optional(),
  })
  .strict();

/**
 * Validate {@link PruneOptions}.
 * @throws InvalidOptionsError naming the bad option: a missing `olderThan`, one that is not a duration (`'30x'`)
 * or is longer than 100 years, a `dryRun` that is not a boolean.
 */
export function resolvePruneOptions(options: PruneOptions): ResolvedPruneOptions {
  const parsed = pruneSchema.safeParse(options);
  if (!parsed.success) throw new InvalidOptionsError('prune options', formatIssues(parsed.error.issues));
  return Object.freeze({ olderThanMs: parsed.data.olderThan, dryRun: parsed.data.dryRun ?? false });
}

/** Options of `engine.worker(...)`. */
export interface WorkerOptions {
  /** Activities this worker serves (standalone or called by workflows). */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly activities?: readonly ActivityDefinition<any, any>[];
  /** Workflows whose turns this worker runs. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflows?: readonly WorkflowDefinition<any, any>[];
  /** Queues to claim from (both activity steps and workflow turns). @defaultValue `['default']` */
  readonly queues?: readonly string[];
  /** Activity attempts run at once. @defaultValue 10 */
  readonly concurrency?: number;
  /**
   * Most activity grants the worker claims ahead of a free slot (prefetch), to start as slots free without a claim
   * of their own: one claim statement then serves up to `concurrency + prefetch` attempts, as graphile-worker's
   * local queue does. It claims ahead one grant for each of its last `prefetch` attempts whose code ran under
   * 200 ms, so a grant waits for a slot about that long at most, and a worker whose activities run long claims
   * only for its free slots and holds nothing back from other workers. A
   * prefetched grant is an ordinary grant (token, nonce, DB-clock lease, attempt row); it is not heartbeated
   * while it waits, and once less than `minGrantFreshness` of its lease is left it is released unstarted and
   * uncharged (I12), within a poll interval, without waiting for a slot; `stop()` releases those still waiting. A whole number, 0 (claim only for free slots) to 1000.
   * @defaultValue concurrency
   */
  readonly prefetch?: number;
  /** Workflow turns run at once. @defaultValue 10 */
  readonly workflowConcurrency?: number;
  /** Lease of one workflow turn; ≥ 3 s. @defaultValue 30_000 (ms) */
  readonly turnLeaseMs?: Duration;
  /**
   * Workflow instances this worker keeps between turns (sticky workflows): after a turn blocks, the run's workflow
   * code stays parked in memory, and when this worker claims the run's next turn it hands the code only the new
   * outcomes instead of replaying the whole history. A run whose previous turn ran elsewhere, or whose history
   * changed otherwise (a retry), replays in full, with the same result. Each kept instance holds the workflow's
   * live state and one small entry per step of its run; the least recently used is dropped beyond this count.
   * A whole number, 0 (keep none: every turn replays in full) to 1,000,000. @defaultValue 1_000
   */
  readonly workflowCacheSize?: number;
  /**
   * Fused steps: when an activity of a workflow run completes on this worker while it keeps the run's workflow
   * instance (see `workflowCacheSize`), run the run's next turn on that instance at once and record the
   * completion, the turn's grant and its commit in one statement — one round trip per step of a sequential
   * workflow instead of two. The statement applies only while the completing attempt holds its step and nothing
   * else changed the run since the instance's last turn; otherwise the completion is recorded on its own and the
   * turn runs as usual. The cost: the step's outcome becomes durable only with its turn, so a worker that dies (or
   * stalls past the step's lease) while that turn's code runs loses the outcome, and the step runs again on another
   * worker — as when a worker dies before recording an outcome, but for a longer window: the turn's run time.
   * Off (the default), the outcome is recorded first and the turn it wakes is claimed for this worker in the same
   * statement (an eager turn); a worker dying mid-turn then costs a replay of the turn only. @defaultValue false
   */
  readonly fuseSteps?: boolean;
  /** Identifies this worker in attempts, events and logs. @defaultValue `<hostname>:<pid>:<random>` */
  readonly workerId?: string;
  /**
   * How often all leases of this worker are renewed, in one statement. Must be ≤ leaseMs / 3 of every activity
   * served. @defaultValue leaseMs / 3 of the activity with the shortest lease
   */
  readonly heartbeatIntervalMs?: Duration;
  /** Client-side timeout of one heartbeat; must be ≤ heartbeatIntervalMs. @defaultValue heartbeatIntervalMs / 2 */
  readonly heartbeatTimeoutMs?: Duration;
  /**
   * Safety margin M subtracted from the local lease deadline, so the worker aborts before the database lets
   * another worker claim. Must be > 0 and < leaseMs / 3 of every activity. @defaultValue max(leaseMs / 10, 1 s)
   * per activity, capped below leaseMs / 3
   */
  readonly leaseSafetyMarginMs?: Duration;
  /** Assumed maximum clock-rate error between worker and database (ρ). @defaultValue 0.001 */
  readonly clockRateError?: number;
  /** A claim that arrives with less than this fraction of its lease left is released unstarted. @defaultValue 0.5 */
  readonly minGrantFreshness?: number;
  /** Polling fallback when no NOTIFY arrives; also the cadence of expiry maintenance. @defaultValue 1_000 (ms) */
  readonly pollIntervalMs?: Duration;
  /** Default grace period of `stop()`. @defaultValue 10_000 (ms) */
  readonly shutdownGraceMs?: Duration;
  /**
   * Evaluate durable schedules (`engine.schedules`): the worker fires the due ticks of every schedule of its
   * engine's schema — whatever workflows, activities and queues it serves — when the earliest falls due by the
   * database clock, and at least every `pollIntervalMs`. Any number of workers may evaluate at once: each tick
   * still starts exactly one run. `false` leaves it to other workers. @defaultValue true
   */
  readonly schedules?: boolean;
}

/** How often a worker sweeps finished runs past the engine's retention (the first sweep is at start), in ms. */
export const RETENTION_SWEEP_INTERVAL_MS = 60_000;

export const WORKER_DEFAULTS = Object.freeze({
  queues: ['default'] as readonly string[],
  concurrency: 10,
  workflowConcurrency: 10,
  workflowCacheSize: 1_000,
  fuseSteps: false,
  turnLeaseMs: 30_000,
  clockRateError: 0.001,
  minGrantFreshness: 0.5,
  pollIntervalMs: 1_000,
  shutdownGraceMs: 10_000,
  schedules: true,
});

/** Timing of one served activity, checked against the worker's heartbeat settings. */
export interface ActivityTiming {
  readonly leaseMs: number;
  readonly startToCloseTimeoutMs: number;
  /** M for this activity's attempts. */
  readonly safetyMarginMs: number;
}

/** {@link WorkerOptions} with defaults filled and every timing constraint checked. */
export interface ResolvedWorkerOptions {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly activities: ReadonlyMap<string, ActivityDefinition<any, any>>;
  readonly timings: ReadonlyMap<string, ActivityTiming>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflows: ReadonlyMap<string, WorkflowDefinition<any, any>>;
  readonly queues: readonly string[];
  readonly concurrency: number;
  /** Most grants claimed ahead of a free slot (see WorkerOptions.prefetch). */
  readonly prefetch: number;
  readonly workflowConcurrency: number;
  readonly workflowCacheSize: number;
  readonly fuseSteps: boolean;
  readonly turnLeaseMs: number;
  readonly workerId: string;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly clockRateError: number;
  readonly minGrantFreshness: number;
  readonly pollIntervalMs: number;
  readonly shutdownGraceMs: number;
  /** Whether the worker evaluates schedules (see WorkerOptions.schedules). */
  readonly schedules: boolean;
  /** How often the retention sweep runs (ms); below the default only under `unsafeTestTimings()`. */
  readonly retentionSweepIntervalMs: number;
}

const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

const workerSchema = z
  .object({
    activities: z.array(z.any()).optional(),
    workflows: z.array(z.any()).optional(),
    queues: z
      .array(z.string().regex(NAME, 'must be 1–128 letters, digits, _ . : -'))
      .min(1, 'must name a queue')
      .optional(),
    concurrency: z
      .number()
      .int('must be a whole number')
      .min(1, 'must be ≥ 1')
      .max(1000, 'must be ≤ 1000')
      .optional(),
    prefetch: z
      .number()
      .int('must be a whole number')
      .min(0, 'must be ≥ 0 (0 claims only for free slots)')
      .max(1000, 'must be ≤ 1000')
      .optional(),
    workflowConcurrency: z.number().int('must be a whole number').min(1, 'must be ≥ 1').max(1000).optional(),
    workflowCacheSize: z
      .number()
      .int('must be a whole number')
      .min(0, 'must be ≥ 0 (0 keeps no workflow instance)')
      .max(1_000_000, 'must be ≤ 1,000,000')
      .optional(),
    fuseSteps: z.boolean().optional(),
    turnLeaseMs: durationMs.optional(),
    workerId: z
      .string()
      .min(1)
      .max(200)
      .refine((id) => textProblem(id) === undefined, 'must be storable text (no NUL, no lone surrogate)')
      .optional(),
    heartbeatIntervalMs: durationMs.optional(),
    heartbeatTimeoutMs: durationMs.optional(),
    leaseSafetyMarginMs: durationMs.optional(),
    clockRateError: z.number().min(0).max(0.1, 'must be ≤ 0.1').optional(),
    minGrantFreshness: z.number().min(0).max(0.9, 'must be ≤ 0.9').optional(),
    pollIntervalMs: durationMs.pipe(z.number().min(10, 'must be ≥ 10 ms')).optional(),
    shutdownGraceMs: durationMs.optional(),
    schedules: z.boolean().optional(),
    /** Test-only (`unsafeTestTimings()`): sweep for retention this often instead of every minute. */
    retentionSweepIntervalMs: durationMs.pipe(z.number().min(10, 'must be ≥ 10 ms')).optional(),
  })
  .strict();

/**
 * Validate worker options against the activities they serve (DESIGN.md §4 invariant 9; I13): lease ≥ 3 s,
 * heartbeat interval ≤ lease / 3, heartbeat timeout ≤ heartbeat interval, 0 < margin < lease / 3. Tests may go
 * lower only through `unsafeTestTimings()` of `@palisade/engine/testing`.
 * @throws InvalidOptionsError naming every violated rule with the values involved.
 */
export function resolveWorkerOptions(options: WorkerOptions, defaultWorkerId: string): ResolvedWorkerOptions {
  const parsed = workerSchema.safeParse(options);
  if (!parsed.success) throw new InvalidOptionsError('worker options', formatIssues(parsed.error.issues));
  const o = parsed.data;
  const unsafe = allowsUnsafeTimings(options);
  const minLeaseMs = unsafe ? MIN_TEST_LEASE_MS : MIN_LEASE_MS;
  const issues: { path: string; message: string }[] = [];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const activities = new Map<string, ActivityDefinition<any, any>>();
  for (const [i, a] of (options.activities ?? []).entries()) {
    const problem = definitionProblem(a, 'activity');
    if (problem) {
      issues.push({
        path: `activities.${i}${problem.path ? `.${problem.path}` : ''}`,
        message: problem.message,
      });
    } else if (activities.has(a.name)) {
      issues.push({ path: `activities.${i}`, message: `activity name ${a.name} is served twice` });
    } else activities.set(a.name, a);
  }
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const workflows = new Map<string, WorkflowDefinition<any, any>>();
  for (const [i, w] of (options.workflows ?? []).entries()) {
    const problem = definitionProblem(w, 'workflow');
    if (problem) {
      issues.push({
        path: `workflows.${i}${problem.path ? `.${problem.path}` : ''}`,
        message: problem.message,
      });
    } else if (workflows.has(w.name)) {
      issues.push({ path: `workflows.${i}`, message: `workflow name ${w.name} is served twice` });
    } else workflows.set(w.name, w);
  }
  if (activities.size === 0 && workflows.size === 0) {
    issues.push({ path: 'activities', message: 'a worker must serve at least one activity or workflow' });
  }
  const turnLeaseMs = o.turnLeaseMs ?? WORKER_DEFAULTS.turnLeaseMs;
  if (turnLeaseMs < minLeaseMs) {
    issues.push({ path: 'turnLeaseMs', message: `must be ≥ ${minLeaseMs} ms, got ${turnLeaseMs} ms` });
  }
  const leases = [...activities.values()].map((a) => a.leaseMs);
  const shortestLeaseMs = leases.length > 0 ? Math.min(...leases) : 30_000;
  const heartbeatIntervalMs = o.heartbeatIntervalMs ?? Math.max(1, Math.floor(shortestLeaseMs / 3));
  const heartbeatTimeoutMs = o.heartbeatTimeoutMs ?? Math.max(1, Math.floor(heartbeatIntervalMs / 2));
  if (heartbeatTimeoutMs > heartbeatIntervalMs) {
    issues.push({
      path: 'heartbeatTimeoutMs',
      message: `must be ≤ heartbeatIntervalMs (${heartbeatIntervalMs} ms), got ${heartbeatTimeoutMs} ms`,
    });
  }
  if (heartbeatIntervalMs <= 0) issues.push({ path: 'heartbeatIntervalMs', message: 'must be > 0' });
  const timings = new Map<string, ActivityTiming>();
  for (const a of activities.values()) {
    if (a.leaseMs < minLeaseMs) {
      issues.push({
        path: `activities.${a.name}.leaseMs`,
        message: `must be ≥ ${minLeaseMs} ms, got ${a.leaseMs} ms (shorter leases expire on ordinary pauses)`,
      });
    }
    if (heartbeatIntervalMs * 3 > a.leaseMs) {
      issues.push({
        path: 'heartbeatIntervalMs',
        message: `must be ≤ leaseMs / 3 of activity ${a.name} (${Math.floor(a.leaseMs / 3)} ms), got ${heartbeatIntervalMs} ms`,
      });
    }
    const margin = o.leaseSafetyMarginMs ?? Math.min(Math.max(a.leaseMs / 10, 1_000), a.leaseMs / 3 - 1);
    if (!(margin > 0) || margin >= a.leaseMs / 3) {
      issues.push({
        path: 'leaseSafetyMarginMs',
        message: `must be > 0 and < leaseMs / 3 of activity ${a.name} (${Math.floor(a.leaseMs / 3)} ms), got ${margin} ms`,
      });
    }
    timings.set(a.name, {
      leaseMs: a.leaseMs,
      startToCloseTimeoutMs: a.startToCloseTimeoutMs,
      safetyMarginMs: margin,
    });
  }
  if (o.retentionSweepIntervalMs !== undefined && !unsafe) {
    issues.push({ path: 'retentionSweepIntervalMs', message: 'is a test-only option (unsafeTestTimings())' });
  }
  if (issues.length > 0) throw new InvalidOptionsError('worker options', issues);
  return Object.freeze({
    activities,
    timings,
    workflows,
    queues: Object.freeze([...(o.queues ?? WORKER_DEFAULTS.queues)]),
    concurrency: o.concurrency ?? WORKER_DEFAULTS.concurrency,
    prefetch: o.prefetch ?? o.concurrency ?? WORKER_DEFAULTS.concurrency,
    workflowConcurrency: o.workflowConcurrency ?? WORKER_DEFAULTS.workflowConcurrency,
    workflowCacheSize: o.workflowCacheSize ?? WORKER_DEFAULTS.workflowCacheSize,
    fuseSteps: o.fuseSteps ?? WORKER_DEFAULTS.fuseSteps,
    turnLeaseMs,
    workerId: o.workerId ?? defaultWorkerId,
    heartbeatIntervalMs,
    heartbeatTimeoutMs,
    clockRateError: o.clockRateError ?? WORKER_DEFAULTS.clockRateError,
    minGrantFreshness: o.minGrantFreshness ?? WORKER_DEFAULTS.minGrantFreshness,
    pollIntervalMs: o.pollIntervalMs ?? WORKER_DEFAULTS.pollIntervalMs,
    shutdownGraceMs: o.shutdownGraceMs ?? WORKER_DEFAULTS.shutdownGraceMs,
    schedules: o.schedules ?? WORKER_DEFAULTS.schedules,
    retentionSweepIntervalMs: o.retentionSweepIntervalMs ?? RETENTION_SWEEP_INTERVAL_MS,
  });
}

/** Options of `worker.stop()` and `engine.close()`. */
export interface StopOptions {
  /**
   * How long running attempts may finish before they are aborted with reason `shutdown`; a duration (ms or
   * `'10s'`), ≤ 2,147,483,647 ms. @defaultValue the worker's shutdownGraceMs
   */
  readonly graceMs?: Duration;
}

const stopSchema = z.object({ graceMs: durationMs.optional() }).strict();

/**
 * Validate {@link StopOptions}.
 * @returns the grace period in ms, or `undefined` for the worker's default.
 * @throws InvalidOptionsError naming the bad option.
 */
export function resolveStopOptions(options: StopOptions = {}): { readonly graceMs: number | undefined } {
  const parsed = stopSchema.safeParse(options);
  if (!parsed.success) throw new InvalidOptionsError('stop options', formatIssues(parsed.error.issues));
  return { graceMs: parsed.data.graceMs };
}
