/**
 * Benchmark settings: every size and engine setting, overridable by environment variables (see `ENV` below).
 * Parsed once into a frozen {@link BenchConfig}; a bad value stops the run before anything is started.
 */
import { fileURLToPath } from 'node:url';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

export type ScenarioName =
  | 'baseline'
  | 'activities'
  | 'concurrency-keys'
  | 'workflows'
  | 'overhead'
  | 'latency'
  | 'long-workflow'
  | 'history'
  | 'memory'
  | 'schedules'
  | 'held-horizon';
export const SCENARIOS: readonly ScenarioName[] = [
  'baseline',
  'activities',
  'concurrency-keys',
  'workflows',
  'overhead',
  'latency',
  'long-workflow',
  'history',
  'memory',
  'schedules',
  'held-horizon',
];

export interface BenchConfig {
  /** DATABASE_URL; undefined: the bench starts an embedded server. */
  readonly databaseUrl: string | undefined;
  readonly databaseUrlFromEnv: boolean;
  /** Scenarios to run (BENCH_ONLY=a,b), in {@link SCENARIOS} order. */
  readonly scenarios: readonly ScenarioName[];
  /** 1. standalone no-op activities per run. */
  readonly activities: number;
  /** 1. worker concurrency of each activity run. */
  readonly activityConcurrencies: readonly number[];
  /** Enqueue/start calls in flight at once while filling a queue (they share the engine's pool). */
  readonly enqueueConcurrency: number;
  /** 2. three-step workflows per run. */
  readonly workflows: number;
  /** 2. activity slots of the workflow worker. */
  readonly workflowActivityConcurrency: number;
  /** 2. turn slots of the workflow worker. */
  readonly workflowTurnConcurrency: number;
  /** 3. timed samples of each workflow kind, after `overheadWarmup` untimed ones. */
  readonly overheadSamples: number;
  readonly overheadWarmup: number;
  /** 4. activities enqueued at `latencyRatePerSec`, after `latencyWarmup` untimed ones. */
  readonly latencyActivities: number;
  readonly latencyRatePerSec: number;
  readonly latencyWarmup: number;
  /** 4. worker concurrency of the latency run. */
  readonly latencyConcurrency: number;
  /** 6. steps of the one long sequential workflow. */
  readonly longWorkflowSteps: number;
  /** 6. steps in each of its compared windows (the first and the last). */
  readonly longWorkflowWindow: number;
  /** 7. finished standalone jobs (one step each) written into the full database before it is measured. */
  readonly historySteps: number;
  /** 7. timed jobs on each database (one at a time, alternating), after `historyWarmup` untimed ones each. */
  readonly historyJobs: number;
  readonly historyWarmup: number;
  /** 8. no-op activities the worker runs while its RSS is sampled. */
  readonly memorySteps: number;
  /** 8. RSS sample (after a full GC) every this many completed steps. */
  readonly memorySampleEvery: number;
  /** 8. worker concurrency of that run. */
  readonly memoryConcurrency: number;
  /** 9. schedules all due at once, evaluated in one tick. */
  readonly schedules: number;
  /** 10. jobs offered per second while the horizon is held (and before and after). */
  readonly horizonRatePerSec: number;
  /** 10. how long jobs are offered, in s; the xid is held from duration/10 for 4/5 of it. */
  readonly horizonSeconds: number;
  /** 10. worker concurrency of that run. */
  readonly horizonConcurrency: number;
  /** 10. how long to wait, after the offering ends, for every offered job to complete (ms). */
  readonly horizonDrainTimeoutMs: number;
  /** Engine pool size (ENGINE_DEFAULTS.poolSize unless overridden). */
  readonly poolSize: number;
  /** Worker poll interval (WORKER_DEFAULTS.pollIntervalMs unless overridden). */
  readonly pollIntervalMs: number;
  /** Lease of the bench activities (the activity default unless overridden); heartbeat = lease / 3. */
  readonly leaseMs: number;
  /** Lease of a workflow turn. */
  readonly turnLeaseMs: number;
  /** Duration of each plain-UPDATE baseline run (1 client, then `poolSize` clients). */
  readonly baselineMs: number;
  /** Time per statement kind (wraps the engine's Database methods); off: counts nothing. */
  readonly profile: boolean;
  /** A run that has not finished after this long is reported as failed. */
  readonly phaseTimeoutMs: number;
  /** Where the JSON results go. */
  readonly resultsPath: string;
}

/** The environment variables this benchmark reads, with their meaning (printed by `--help`). */
export const ENV: Readonly<Record<string, string>> = {
  DATABASE_URL:
    'PostgreSQL to measure (default: an embedded server the bench starts, e.g. DATABASE_URL=' +
    `${DEFAULT_DATABASE_URL} for the local one)`,
  BENCH_ONLY: `comma-separated subset of ${SCENARIOS.join(',')}`,
  BENCH_ACTIVITIES: 'no-op activities per throughput run (10000)',
  BENCH_CONCURRENCY: 'worker concurrencies of the activity runs (10,50)',
  BENCH_ENQUEUE_CONCURRENCY: 'enqueue/start calls in flight while filling a queue (50)',
  BENCH_WORKFLOWS: 'three-step workflows per throughput run (1000)',
  BENCH_WORKFLOW_CONCURRENCY: 'activity slots of the workflow worker (50)',
  BENCH_TURN_CONCURRENCY: 'turn slots of the workflow worker (50)',
  BENCH_OVERHEAD_SAMPLES: 'timed samples per workflow kind for the per-step overhead (100)',
  BENCH_OVERHEAD_WARMUP: 'untimed warm-up runs per workflow kind (20)',
  BENCH_LATENCY_ACTIVITIES: 'activities of the enqueue-to-start run (500)',
  BENCH_LATENCY_RATE: 'enqueues per second of that run (50)',
  BENCH_LATENCY_WARMUP: 'untimed paced activities before it (20)',
  BENCH_LATENCY_CONCURRENCY: 'worker concurrency of that run (10)',
  BENCH_LONG_WORKFLOW_STEPS: 'steps of the one long sequential workflow (1000)',
  BENCH_LONG_WORKFLOW_WINDOW: 'steps in its first and last window, whose times are compared (100)',
  BENCH_HISTORY_STEPS:
    'finished jobs (1 run, step, attempt, 4 events each) written into the full database (1000000)',
  BENCH_HISTORY_JOBS: 'timed single jobs on the empty and on the full database each (200)',
  BENCH_HISTORY_WARMUP: 'untimed jobs on each database first (20)',
  BENCH_MEMORY_STEPS:
    'no-op activities run while the worker RSS is sampled (50000, a few minutes; 10^6 took 8.4 min on this 2-core machine)',
  BENCH_MEMORY_SAMPLE_EVERY: 'RSS sample after a full GC every this many steps (steps / 20)',
  BENCH_MEMORY_CONCURRENCY: 'worker concurrency of that run (50)',
  BENCH_SCHEDULES: 'schedules due at once, evaluated in one tick by one and then by three evaluators (10000)',
  BENCH_HORIZON_RATE: 'held-horizon: no-op jobs offered per second, sent every 20 ms by enqueueMany (500)',
  BENCH_HORIZON_SECONDS:
    'held-horizon: seconds of offering; an assigned xid is held from 1/10 of it for 4/5 of it (300: 30 s to 270 s)',
  BENCH_HORIZON_CONCURRENCY: 'held-horizon: worker concurrency (50)',
  BENCH_HORIZON_DRAIN_TIMEOUT_MS:
    'held-horizon: after the offering ends, wait this long for the backlog to complete (120000)',
  BENCH_POOL_SIZE: 'engine pool size (10, the engine default)',
  BENCH_POLL_INTERVAL_MS: 'worker poll interval (1000, the engine default)',
  BENCH_LEASE_MS: 'activity lease; heartbeat = lease / 3 (30000, the activity default)',
  BENCH_TURN_LEASE_MS: 'workflow turn lease (30000, the engine default)',
  BENCH_BASELINE_MS: 'length of each plain-UPDATE baseline run, 0 to skip (2000)',
  BENCH_PROFILE: 'time every engine statement by kind, 0 to disable (1)',
  BENCH_PHASE_TIMEOUT_MS: 'give up on a run after this long (180000)',
  BENCH_RESULTS: 'JSON output path (test/bench/results/latest.json)',
};

function int(name: string, fallback: number, min: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw.replaceAll('_', ''));
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`${name} must be a whole number ≥ ${min}, got ${JSON.stringify(raw)}`);
  }
  return value;
}

function intList(name: string, fallback: readonly number[]): readonly number[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const values = raw.split(',').map((s) => Number(s.trim()));
  if (values.length === 0 || values.some((v) => !Number.isInteger(v) || v < 1 || v > 1000)) {
    throw new Error(
      `${name} must be a comma-separated list of whole numbers 1–1000, got ${JSON.stringify(raw)}`,
    );
  }
  return values;
}

function flag(name: string, fallback: boolean): boolean {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  throw new Error(`${name} must be 0 or 1, got ${JSON.stringify(raw)}`);
}

function scenarios(): readonly ScenarioName[] {
  const raw = process.env.BENCH_ONLY;
  if (raw === undefined || raw.trim() === '') return SCENARIOS;
  const wanted = raw.split(',').map((s) => s.trim());
  const unknown = wanted.filter((s) => !(SCENARIOS as readonly string[]).includes(s));
  if (unknown.length > 0) {
    throw new Error(`BENCH_ONLY: unknown scenario(s) ${unknown.join(', ')}; known: ${SCENARIOS.join(', ')}`);
  }
  return SCENARIOS.filter((s) => wanted.includes(s));
}

/** @throws Error naming the first bad environment variable. */
export function loadConfig(): BenchConfig {
  const fromEnv = process.env.DATABASE_URL !== undefined && process.env.DATABASE_URL !== '';
  const leaseMs = int('BENCH_LEASE_MS', 30_000, 3_000);
  const longWorkflowSteps = int('BENCH_LONG_WORKFLOW_STEPS', 1_000, 2);
  const longWorkflowWindow = int(
    'BENCH_LONG_WORKFLOW_WINDOW',
    Math.min(100, Math.floor(longWorkflowSteps / 2)),
    1,
  );
  if (2 * longWorkflowWindow > longWorkflowSteps) {
    throw new Error(
      `BENCH_LONG_WORKFLOW_WINDOW (${longWorkflowWindow}) must be at most half of BENCH_LONG_WORKFLOW_STEPS` +
        ` (${longWorkflowSteps}): the first and the last window may not overlap`,
    );
  }
  const memorySteps = int('BENCH_MEMORY_STEPS', 50_000, 1);
  return Object.freeze({
    databaseUrl: fromEnv ? (process.env.DATABASE_URL as string) : undefined,
    databaseUrlFromEnv: fromEnv,
    scenarios: scenarios(),
    activities: int('BENCH_ACTIVITIES', 10_000, 1),
    activityConcurrencies: intList('BENCH_CONCURRENCY', [10, 50]),
    enqueueConcurrency: int('BENCH_ENQUEUE_CONCURRENCY', 50, 1),
    workflows: int('BENCH_WORKFLOWS', 1_000, 1),
    workflowActivityConcurrency: int('BENCH_WORKFLOW_CONCURRENCY', 50, 1),
    workflowTurnConcurrency: int('BENCH_TURN_CONCURRENCY', 50, 1),
    overheadSamples: int('BENCH_OVERHEAD_SAMPLES', 100, 1),
    overheadWarmup: int('BENCH_OVERHEAD_WARMUP', 20, 0),
    latencyActivities: int('BENCH_LATENCY_ACTIVITIES', 500, 1),
    latencyRatePerSec: int('BENCH_LATENCY_RATE', 50, 1),
    latencyWarmup: int('BENCH_LATENCY_WARMUP', 20, 0),
    latencyConcurrency: int('BENCH_LATENCY_CONCURRENCY', 10, 1),
    longWorkflowSteps,
    longWorkflowWindow,
    historySteps: int('BENCH_HISTORY_STEPS', 1_000_000, 1),
    historyJobs: int('BENCH_HISTORY_JOBS', 200, 1),
    historyWarmup: int('BENCH_HISTORY_WARMUP', 20, 0),
    memorySteps,
    memorySampleEvery: int('BENCH_MEMORY_SAMPLE_EVERY', Math.max(1, Math.floor(memorySteps / 20)), 1),
    memoryConcurrency: int('BENCH_MEMORY_CONCURRENCY', 50, 1),
    schedules: int('BENCH_SCHEDULES', 10_000, 1),
    horizonRatePerSec: int('BENCH_HORIZON_RATE', 500, 1),
    horizonSeconds: int('BENCH_HORIZON_SECONDS', 300, 10),
    horizonConcurrency: int('BENCH_HORIZON_CONCURRENCY', 50, 1),
    horizonDrainTimeoutMs: int('BENCH_HORIZON_DRAIN_TIMEOUT_MS', 120_000, 1_000),
    poolSize: int('BENCH_POOL_SIZE', 10, 2),
    pollIntervalMs: int('BENCH_POLL_INTERVAL_MS', 1_000, 10),
    leaseMs,
    turnLeaseMs: int('BENCH_TURN_LEASE_MS', 30_000, 3_000),
    baselineMs: int('BENCH_BASELINE_MS', 2_000, 0),
    profile: flag('BENCH_PROFILE', true),
    phaseTimeoutMs: int('BENCH_PHASE_TIMEOUT_MS', 180_000, 1_000),
    resultsPath:
      process.env.BENCH_RESULTS ?? fileURLToPath(new URL('./results/latest.json', import.meta.url)),
  });
}
