import { z } from 'zod';
import {
  InvalidOptionsError,
  type ActivityDefinition,
  type Duration,
  type WorkflowDefinition,
} from '@palisade/sdk';
import { textProblem, durationMs, parseOptions, definitionProblem } from '@palisade/sdk/internal';
import { MIN_LEASE_MS, MIN_TEST_LEASE_MS, allowsUnsafeTimings } from '../internal/unsafe-timings.js';

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
   * local queue does. It sizes that by the mean run time of its last 32 attempts: as many grants ahead as its slots
   * start within 200 ms (`concurrency` × 200 ms / mean, at most `prefetch`), so a grant waits for a slot
   * about that long, and while that mean is 200 ms or more it claims only for its free slots and holds nothing
   * back from other workers (nor before its first attempt ran). A prefetched grant is an ordinary grant (token, nonce, DB-clock lease, attempt row); it is not heartbeated
   * while it waits, and once less than `minGrantFreshness` of its lease is left it is released unstarted and
   * uncharged (I12), within a poll interval, without waiting for a slot; `stop()` releases those still waiting. A whole number, 0 (claim only for free slots) to 1000.
   * @defaultValue max(concurrency, 50)
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
   * Fused steps (off by default): when an activity of a workflow run completes on this worker while it keeps the
   * run's workflow instance (see `workflowCacheSize`) and that instance awaits the step, run the run's next turn on
   * that instance at once and record the completion, the turn's grant (a fresh token, nonce and attempts row) and
   * its commit in one statement, which also grants this worker the activities the turn schedules — one statement
   * and one commit per step of a sequential workflow instead of two.
   *
   * It applies only while all of these hold, else the completion is recorded on its own (and claims the turn it
   * wakes for this worker, an eager turn), with the same history either way: the run's previous turn ran and
   * committed blocked on this worker and its instance is still kept; a turn slot is free and the worker is not
   * stopping; the attempt completed (a failure is recorded on its own); and, judged by the statement under the
   * run's lock, the attempt still holds its step with an unexpired lease, no turn of the run was granted since,
   * nothing woke the run since (another step's outcome, a signal, a child's end, a cancel request) and no timer of
   * it is due. Parallel steps of one run completing at once on this worker are fused one after another.
   *
   * The trade: the step's outcome becomes durable only with its turn's commit, so a worker that dies (or stalls
   * past the step's lease) while that turn's code runs loses the outcome, and the step runs again on another worker
   * under a larger token — as when a worker dies before recording any outcome, with a window longer by the turn's
   * run time. Execution stays at least once and every write stays fenced. Off (the default) records every outcome
   * first; a worker dying mid-turn then costs a replay of the turn only, and no completed step runs again — why it
   * is not the default (test/cases/kill-mid-run.test.ts, case b). @defaultValue false
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

/**
 * The rotation of `ready` (STORAGE.md §3.6): every this many ms a worker asks for one (`<schema>.ready_rotate`),
 * which happens when the current slot has been current at least this long and holds at least
 * {@link READY_ROTATION_MIN_BYTES} of heap; with any number of workers the ring turns at most once per interval.
 */
export const READY_ROTATION_INTERVAL_MS = 1_000;

/**
 * The heap the current `ready` slot must hold before the ring turns (bytes): about 1,000 jobs' inserts and claim
 * moves. An idle engine, or one holding only delayed rows, never rotates (its rows would be moved for nothing).
 */
export const READY_ROTATION_MIN_BYTES = 256 * 1024;

/**
 * How often a working worker checks the planner statistics of the engine's tables where autovacuum is off (ms; see
 * `analyzeStaleTables` and `TableAnalyzer`), after a first check at start: one read of `pg_stat_user_tables`, and
 * an ANALYZE of the tables that about doubled or turned over since their last one. Half autovacuum's default
 * `autovacuum_naptime`.
 */
export const TABLE_ANALYZE_CHECK_INTERVAL_MS = 30_000;

/**
 * The default `prefetch` when it is above `concurrency`. No-op jobs, peer adapter, two runs each: at c = 10,
 * ~3,400 jobs/s with a prefetch of 10, ~5,100 with 50, ~4,600 with 100; at c = 50, ~5,900 with 50, ~5,100 with
 * 100 (larger claims then wait on the completions they overlap).
 */
export const DEFAULT_PREFETCH = 50;

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

type Issue = { path: string; message: string };

/**
 * The definitions of `kind` given in a worker's `activities` or `workflows`, by name; an issue for each one that is
 * not a definition of that kind (by `definitionProblem`) or whose name another one already took.
 */
function definitionsByName<D extends { readonly name: string }>(
  kind: 'activity' | 'workflow',
  given: readonly unknown[] | undefined,
  issues: Issue[],
): Map<string, D> {
  const list = kind === 'activity' ? 'activities' : 'workflows';
  const byName = new Map<string, D>();
  for (const [i, d] of (given ?? []).entries()) {
    const problem = definitionProblem(d, kind);
    if (problem) {
      issues.push({
        path: `${list}.${i}${problem.path ? `.${problem.path}` : ''}`,
        message: problem.message,
      });
      continue;
    }
    const def = d as D;
    if (byName.has(def.name)) {
      issues.push({ path: `${list}.${i}`, message: `${kind} name ${def.name} is served twice` });
    } else byName.set(def.name, def);
  }
  return byName;
}

/**
 * The timing of each served activity, checked against the worker's heartbeat interval: lease ≥ `minLeaseMs`,
 * heartbeat interval ≤ lease / 3, 0 < margin < lease / 3 (the margin `leaseSafetyMarginMs`, else
 * max(lease / 10, 1 s) capped below lease / 3). Pushes an issue for each rule an activity breaks.
 */
function activityTimings(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  activities: Iterable<ActivityDefinition<any, any>>,
  c: {
    readonly minLeaseMs: number;
    readonly heartbeatIntervalMs: number;
    readonly leaseSafetyMarginMs: number | undefined;
    readonly issues: Issue[];
  },
): Map<string, ActivityTiming> {
  const { minLeaseMs, heartbeatIntervalMs, issues } = c;
  const timings = new Map<string, ActivityTiming>();
  for (const a of activities) {
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
    const margin = c.leaseSafetyMarginMs ?? Math.min(Math.max(a.leaseMs / 10, 1_000), a.leaseMs / 3 - 1);
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
  return timings;
}

/**
 * Validate worker options against the activities they serve (DESIGN.md §4 invariant 9; I13): lease ≥ 3 s,
 * heartbeat interval ≤ lease / 3, heartbeat timeout ≤ heartbeat interval, 0 < margin < lease / 3. Tests may go
 * lower only through `unsafeTestTimings()` of `@palisade/engine/testing`.
 * @throws InvalidOptionsError naming every violated rule with the values involved.
 */
export function resolveWorkerOptions(options: WorkerOptions, defaultWorkerId: string): ResolvedWorkerOptions {
  const o = parseOptions(workerSchema, options, 'worker options');
  const unsafe = allowsUnsafeTimings(options);
  const minLeaseMs = unsafe ? MIN_TEST_LEASE_MS : MIN_LEASE_MS;
  const issues: Issue[] = [];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const activities = definitionsByName<ActivityDefinition<any, any>>('activity', options.activities, issues);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const workflows = definitionsByName<WorkflowDefinition<any, any>>('workflow', options.workflows, issues);
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
  const timings = activityTimings(activities.values(), {
    minLeaseMs,
    heartbeatIntervalMs,
    leaseSafetyMarginMs: o.leaseSafetyMarginMs,
    issues,
  });
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
    prefetch: o.prefetch ?? Math.max(o.concurrency ?? WORKER_DEFAULTS.concurrency, DEFAULT_PREFETCH),
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
