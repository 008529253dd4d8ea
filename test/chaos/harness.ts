/**
 * The fault-injection ("chaos") harness: real worker processes against a PostgreSQL server the suite owns,
 * faults injected from outside, and a checker over the database afterwards (research/fencing-semantics.md §3).
 *
 * ## Writing a scenario
 *
 * A scenario is a {@link Scenario}: a name, iteration counts (full run / CI subset) and
 * `run(ctx, iterations)`, built with `defineScenario` (./define-scenario.ts), which runs the loop. Put it in
 * `test/chaos/scenarios/<tNN-name>.ts` and add it to `SCENARIOS` in ./scenarios/index.ts; `pnpm chaos` (./run.ts)
 * and the CI subset (./chaos.test.ts) pick it up from there.
 *
 *   export const frozenZombie = defineScenario('T2 frozen zombie', {
 *     description: '…', iterations: { full: 30, ci: 3, variants: [1.2, 2, 5] },
 *     setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),  // once; handed to each iteration
 *     async iteration(ctx, { variant: factor }, [a, b]) {
 *       const run = await ctx.enqueue({ iterations: 40 });          // one `chaos-loop` step
 *       const { worker, claim } = await ctx.waitForClaim(run.runId, [a, b]);
 *       await ctx.sleepUntil(claim.wallMs + ctx.rng.int(100, 1_500));
 *       ctx.fault('sigstop'); worker.kill('SIGSTOP'); …           // inject, count it
 *       ctx.sample('abortLatencyMs', …);                           // figures
 *       ctx.expect(cond, 'what should have held');                 // scenario-specific assertions
 *       await ctx.waitForRunEnd(run.runId);
 *     },
 *   });
 *
 * Faults and checks that several scenarios share live beside them: ./backend-faults.ts (row locks, terminated
 * backends), ./proxy-faults.ts (workers behind a TCP proxy, lost replies), and per fixture
 * ./scenarios/batch-wave.ts (batched completions), ./scenarios/eager-flow.ts (eager and fused grants) and
 * ./scenarios/completions.ts (a completion's grants, answers, acknowledgement, stale record).
 *
 * The context gives each scenario a fresh engine schema (migrated, with the chaos `effects` table and the
 * audit trigger installed), an admin client (`ctx.sql`), an engine for enqueueing (`ctx.engine`, it runs no
 * worker), worker processes (`ctx.spawnWorker`, each serving `chaos-loop` plus the fixture activities), TCP
 * proxies (`ctx.proxy`), an operator revoke (`ctx.revoke`), the suite's server (`ctx.server`, which can be
 * shut down and restarted) and a seeded RNG (`ctx.rng`; the seed is printed, `CHAOS_SEED` replays it).
 *
 * ## What the checker needs
 *
 * Nothing beyond using the harness: the audit trigger records every grant, heartbeat, release and outcome of
 * every step; the `chaos-loop` activity records its effects and its client history (`chaos:op` messages);
 * every worker's IPC messages (including those of workers that were killed) are collected. After `run`
 * returns, the harness resumes any frozen worker, makes sure one healthy worker serves (the heal phase), waits
 * until every run is terminal, stops the workers and runs ./checker.ts. So a scenario must:
 * - do all its writes through `chaos-loop` (or record them in `effects` the same way);
 * - spawn workers through `ctx.spawnWorker` (so their history is collected and they are cleaned up);
 * - use `ctx.revoke` (worker id `operator:revoke`) for operator actions that bump a token, so the checker
 *   knows a revoke from a grant;
 * - count each injected fault with `ctx.fault(kind)`, and report latencies with `ctx.sample(metric, ms)`
 *   (metric names in {@link MetricName} are printed in the figures table; others are listed after it).
 * Wait on events (`worker.waitFor`, `ctx.waitForClaim`, `ctx.waitForRunEnd`) or bounded DB polling
 * (`ctx.poll`); `ctx.sleepUntil` is for placing a fault at a chosen moment, never for waiting on an outcome.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type postgres from '@palisade/engine/postgres';
import { reconnectingClient } from '../support/reconnecting-client.js';
import { createEngine, type Engine, type RunHandle } from '@palisade/engine';
import type { WorkflowDefinition } from '@palisade/sdk';
import type { ChildMessage, ChildMessageOf, FixtureTimings } from '../fixtures/worker-protocol.js';
import { startPostgresServer, type PostgresServer } from '../support/server.js';
import { createTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import { spawnWorkerProcess, type WorkerClockSkew, type WorkerProcess } from '../support/worker-process.js';
import { OPERATOR_PREFIX, auditDdl } from './audit.js';
import {
  chaosActivity,
  chaosWorkflow,
  effectsTableDdl,
  type ChaosFlowInput,
  type ChaosInput,
} from './chaos-activity.js';
import { checkScenario, describeViolations, type CheckResult } from './checker.js';

const EXTENSION_MODULE = fileURLToPath(new URL('./chaos-activity.ts', import.meta.url));

/** Test-only timings (research §3.3 uses L = 1.5 s; 2 s leaves room on a loaded 2-core machine). */
export interface ChaosTimings {
  readonly leaseMs: number;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly pollIntervalMs: number;
  /** Reclaim backoff after an expiry (the retry policy's first interval, no jitter). */
  readonly reclaimDelayMs: number;
  /** The workers' safety margin M. @defaultValue the engine's (max(L / 10, 1 s), capped below L / 3) */
  readonly leaseSafetyMarginMs?: number;
}

export const DEFAULT_TIMINGS: ChaosTimings = Object.freeze({
  leaseMs: 2_000,
  heartbeatIntervalMs: 500,
  heartbeatTimeoutMs: 500,
  pollIntervalMs: 100,
  reclaimDelayMs: 100,
});

/** Scheduling slack on a loaded 2-core machine (IPC, polling, timer lateness), for latency bounds. */
export const SCHEDULING_SLACK_MS = 1_500;

/**
 * λ: the largest event-loop lag (ms) any of `workers` reported (`chaos:lag`, every 250 ms) from `fromMs` to `toMs`
 * (wall clock), each end widened by 500 ms; 0 when none did. A latency bound adds it: on a loaded machine a
 * worker's timer (a poll, a lease deadline) fires late by as much, and so does what it triggers.
 */
export function measuredLagMs(workers: Iterable<WorkerProcess>, fromMs: number, toMs: number): number {
  return Math.max(
    0,
    ...[...workers].flatMap((w) =>
      w.all('chaos:lag', (m) => m.wallMs >= fromMs - 500 && m.wallMs <= toMs + 500).map((m) => m.maxLagMs),
    ),
  );
}

/**
 * The first wall time from `fromMs` on at which one of `workers` (at the harness's default concurrency, 1) had a free slot: a worker
 * whose activity was running at `fromMs` frees it when that activity's code ends (`fixture:ended`); one spawned
 * after `fromMs` has it once ready; any other had it at `fromMs`. `Infinity` while none has.
 */
export function firstFreeSlotMs(workers: Iterable<WorkerProcess>, fromMs: number): number {
  let first = Infinity;
  for (const w of workers) {
    const ready = w.all('process:ready')[0]?.wallMs ?? Infinity;
    if (ready > fromMs) {
      first = Math.min(first, ready);
      continue;
    }
    const endedBy = (token: string, byMs: number): number | undefined =>
      w.all('fixture:ended', (m) => m.attempt.token === token && m.wallMs <= byMs)[0]?.wallMs;
    const running = w
      .all('fixture:started', (m) => m.wallMs <= fromMs)
      .find((m) => endedBy(m.attempt.token, fromMs) === undefined);
    first = Math.min(first, running ? (endedBy(running.attempt.token, Infinity) ?? Infinity) : fromMs);
  }
  return first;
}

/** Metrics printed in the figures table (ms). */
export type MetricName =
  /** From losing a lease (SIGCONT, unblock, revoke commit) to `ctx.signal` firing in the zombie. */
  | 'abortLatencyMs'
  /** DB expiry minus the moment a cut-off worker aborted (> 0: it stopped before anyone could reclaim). */
  | 'abortLeadMs'
  /** From SIGKILL to the next grant of the killed worker's step. */
  | 'reclaimLatencyMs';

/** The PostgreSQL server the suite owns: always embedded, on its own port and data directory. */
export interface ChaosServer {
  /** URL of the suite's database on it. */
  readonly databaseUrl: string;
  readonly server: PostgresServer;
  /** Stop the server process, keeping its data (`'immediate'` is a crash: recovery on the next start). */
  shutdown(mode: 'fast' | 'immediate'): Promise<void>;
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function startChaosServer(): Promise<ChaosServer> {
  // A crash (immediate shutdown) must not lose acknowledged commits: with synchronous_commit off the server
  // acknowledges a COMMIT before its WAL is written, and C-ack would find completions missing after a restart.
  // fsync and full_page_writes may stay off: the OS keeps the page cache when only PostgreSQL crashes.
  // Scenarios find a worker's statement waiting in the database by its text in pg_stat_activity (../backend-faults.ts),
  // which keeps only the first track_activity_query_size bytes (1 kB by default): the completion statement's
  // `SET status = 'completed'` lies past that since eager turns lengthened its run lock, and so does a turn
  // commit's eager dispatch. Keep whole statements.
  const server = await startPostgresServer({
    embedded: true,
    settings: { synchronous_commit: 'on', track_activity_query_size: '32768' },
  });
  const admin = reconnectingClient(server.adminUrl, { max: 1 });
  try {
    await admin.unsafe('CREATE DATABASE chaos');
  } finally {
    await admin.end({ timeout: 5 });
  }
  const url = new URL(server.adminUrl);
  url.pathname = '/chaos';
  if (!server.shutdown || !server.start) throw new Error('the chaos server must be embedded (restartable)');
  return {
    databaseUrl: url.toString(),
    server,
    shutdown: (mode) => server.shutdown?.(mode) ?? Promise.resolve(),
    start: () => server.start?.() ?? Promise.resolve(),
    close: () => server.stop(),
  };
}

/** A small seeded PRNG (mulberry32), so a failing run can be replayed with its seed. */
export interface Rng {
  readonly seed: number;
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [min, max]. */
  int(min: number, max: number): number;
  pick<T>(items: readonly T[]): T;
}

export function createRng(seed: number): Rng {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return {
    seed,
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => {
      const item = items[Math.floor(next() * items.length)];
      if (item === undefined) throw new Error('pick() from an empty list');
      return item;
    },
  };
}

export interface SpawnOptions {
  workerId?: string;
  deferStart?: boolean;
  /** Where the worker connects (a proxy's URL). @defaultValue the suite's database, direct */
  databaseUrl?: string;
  /** @defaultValue 1 */
  concurrency?: number;
  timings?: Partial<ChaosTimings>;
  /**
   * Lease of `chaos-loop` as this worker defines it (ms), for workers that must be refused at start (T14).
   * Runs are enqueued with the scenario's lease; the worker's own definition is what its options are checked
   * against. @defaultValue the scenario's `leaseMs`
   */
  activityLeaseMs?: number;
  /**
   * Whether the worker's completions carry their run's next turn (fused steps, T24); otherwise the turn a
   * completion wakes is claimed for the worker in the same statement (an eager turn). @defaultValue the engine's
   * (false)
   */
  fuseSteps?: boolean;
  /** The engine's `retentionMs` (ms) in the worker process, and how often it sweeps (test-only). */
  retentionMs?: number;
  retentionSweepIntervalMs?: number;
  /** Run the worker with a wrong clock (`Date` offset, `performance.now()` rate); its messages stay on host time. */
  clock?: WorkerClockSkew;
}

export interface EnqueuedRun {
  readonly runId: string;
  readonly stepId: string;
}

/** What a scenario gets. */
export interface ScenarioContext {
  readonly name: string;
  readonly rng: Rng;
  readonly timings: ChaosTimings;
  readonly server: ChaosServer;
  readonly schema: string;
  /** The suite's database URL (direct). */
  readonly databaseUrl: string;
  /** An admin client on the suite's database. */
  readonly sql: postgres.Sql;
  /** An engine on the scenario's schema, for enqueueing and reading runs; it runs no worker. */
  readonly engine: Engine;
  /** A worker process serving `chaos-loop` (and the fixture activities) on the scenario's schema. */
  spawnWorker(options?: SpawnOptions): Promise<WorkerProcess>;
  /** Enqueue one `chaos-loop` run (a standalone activity: one step). */
  enqueue(input: ChaosInput): Promise<EnqueuedRun>;
  /** Start one `chaos-flow` workflow run (its steps are `chaos-loop`; turn lease = the scenario's `leaseMs`). */
  startWorkflow(input: ChaosFlowInput): Promise<{ readonly runId: string }>;
  /** The `chaos-loop` activity as the workers serve it (to schedule it, say). */
  readonly loop: ReturnType<typeof chaosActivity>;
  /** Count runs created otherwise (by a schedule, say) as the scenario's: the checker expects every run. */
  adoptRuns(runIds: readonly string[]): void;
  /** Start a run of any workflow the worker processes serve, counted as the scenario's (the checker expects it). */
  startRun(workflow: WorkflowDefinition, input: unknown): Promise<RunHandle>;
  /** The first claim of `runId` by any of `workers` (after message index `after` of each, if given). */
  waitForClaim(
    runId: string,
    workers: readonly WorkerProcess[],
    options?: { timeoutMs?: number; notToken?: string },
  ): Promise<{ worker: WorkerProcess; claim: ChildMessageOf<'attempt:claimed'> }>;
  /** Resolve when the run is terminal (bounded DB polling); returns its status. */
  waitForRunEnd(runId: string, timeoutMs?: number): Promise<string>;
  /** Poll `probe` every 50 ms until it returns a value other than undefined; throws after `timeoutMs`. */
  poll<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs?: number): Promise<T>;
  /** Wait until the host clock reads `wallMs` (to place a fault; never to wait for an outcome). */
  sleepUntil(wallMs: number): Promise<void>;
  /**
   * Operator action: take the step's lease away by bumping its token (worker `operator:revoke`, lease ending
   * now, claimable at once), as an admin UPDATE would. @returns the host-clock ms of the revoking statement.
   */
  revoke(stepId: string): Promise<number>;
  /** A TCP proxy in front of the suite's server; closed after the scenario. */
  proxy(): Promise<TcpProxy>;
  /** Count one injected fault of `kind`. */
  fault(kind: string): void;
  /** Record one sample of a metric (ms). */
  sample(metric: MetricName | (string & {}), value: number): void;
  /** A scenario-specific assertion; a false one fails the scenario (and `pnpm chaos`). */
  expect(condition: boolean, description: string): void;
  /** Every message received so far from every worker process of this scenario. */
  history(): ChildMessage[];
}

export interface Scenario {
  readonly name: string;
  /** One line: the fault and what must hold. */
  readonly description: string;
  readonly iterations: { readonly full: number; readonly ci: number };
  /** Timings, if not {@link DEFAULT_TIMINGS}. */
  readonly timings?: Partial<ChaosTimings>;
  run(ctx: ScenarioContext, iterations: number): Promise<void>;
}

export interface ScenarioReport {
  readonly name: string;
  readonly iterations: number;
  readonly seed: number;
  readonly durationMs: number;
  readonly faults: Record<string, number>;
  readonly metrics: Record<string, number[]>;
  readonly check: CheckResult;
  /** Failed `ctx.expect`s and errors the scenario threw. */
  readonly failures: string[];
  /** Where the client history was written (JSONL), when the scenario failed. */
  readonly historyFile?: string | undefined;
}

/** True when the report has any violation, a stale write not rejected, or a failed scenario assertion. */
export function failed(report: ScenarioReport): boolean {
  return (
    Object.values(report.check.violations).some((n) => n > 0) ||
    report.check.staleAttempted !== report.check.staleRejected ||
    report.failures.length > 0
  );
}

/** Run `scenario` on a fresh schema of `server`, then heal, check and clean up. */
export async function runScenario(
  server: ChaosServer,
  scenario: Scenario,
  options: { iterations: number; seed: number; log?: (line: string) => void },
): Promise<ScenarioReport> {
  const started = performance.now();
  const log = options.log ?? (() => undefined);
  const timings: ChaosTimings = { ...DEFAULT_TIMINGS, ...scenario.timings };
  const fixtureTimings: FixtureTimings = {
    leaseMs: timings.leaseMs,
    startToCloseTimeoutMs: 120_000,
    retry: { maximumAttempts: 25, initialIntervalMs: timings.reclaimDelayMs, jitter: 0 },
  };
  const schema = `chaos_${randomBytes(4).toString('hex')}`;
  const sql = reconnectingClient(server.databaseUrl, { max: 4 });
  const engine = await createEngine({ databaseUrl: server.databaseUrl, schema });
  await sql.unsafe(effectsTableDdl(schema) + auditDdl(schema));
  const loop = chaosActivity(fixtureTimings);
  const flow = chaosWorkflow(loop);

  const workers: WorkerProcess[] = [];
  const alive = new Set<WorkerProcess>();
  const proxies: TcpProxy[] = [];
  const faults: Record<string, number> = {};
  const metrics: Record<string, number[]> = {};
  const failures: string[] = [];
  const runIds: string[] = [];
  let workerCount = 0;

  const spawnWorker = async (o: SpawnOptions = {}): Promise<WorkerProcess> => {
    const t = { ...timings, ...o.timings };
    const w = await spawnWorkerProcess(
      {
        databaseUrl: o.databaseUrl ?? server.databaseUrl,
        schema,
        workerId: o.workerId ?? `w${++workerCount}`,
        timings:
          o.activityLeaseMs === undefined
            ? fixtureTimings
            : { ...fixtureTimings, leaseMs: o.activityLeaseMs },
        heartbeatIntervalMs: t.heartbeatIntervalMs,
        heartbeatTimeoutMs: t.heartbeatTimeoutMs,
        pollIntervalMs: t.pollIntervalMs,
        ...(t.leaseSafetyMarginMs !== undefined ? { leaseSafetyMarginMs: t.leaseSafetyMarginMs } : {}),
        turnLeaseMs: t.leaseMs,
        concurrency: o.concurrency ?? 1,
        ...(o.fuseSteps !== undefined ? { fuseSteps: o.fuseSteps } : {}),
        shutdownGraceMs: 1_000,
        extensionModule: EXTENSION_MODULE,
        ...(o.deferStart ? { deferStart: true } : {}),
        ...(o.retentionMs !== undefined ? { retentionMs: o.retentionMs } : {}),
        ...(o.retentionSweepIntervalMs !== undefined
          ? { retentionSweepIntervalMs: o.retentionSweepIntervalMs }
          : {}),
      },
      o.clock ? { clock: o.clock } : {},
    );
    workers.push(w);
    alive.add(w);
    void w.exited.then(() => alive.delete(w));
    return w;
  };

  const poll = async <T>(
    what: string,
    probe: () => Promise<T | undefined>,
    timeoutMs = 30_000,
  ): Promise<T> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await probe();
      if (value !== undefined) return value;
      if (Date.now() > deadline) throw new Error(`${scenario.name}: ${what} not within ${timeoutMs} ms`);
      await sleep(50);
    }
  };

  const runStatus = async (runId: string): Promise<string | undefined> => {
    const [row] = await sql.unsafe<{ status: string }[]>(
      `SELECT status FROM "${schema}".runs WHERE id = $1`,
      [runId],
    );
    return row?.status;
  };

  const ctx: ScenarioContext = {
    name: scenario.name,
    rng: createRng(options.seed),
    timings,
    server,
    schema,
    databaseUrl: server.databaseUrl,
    sql,
    engine,
    spawnWorker,
    loop,
    adoptRuns(ids) {
      runIds.push(...ids);
    },
    async enqueue(input) {
      const handle = await engine.client.enqueue(loop, input);
      runIds.push(handle.runId);
      const [step] = await sql.unsafe<{ id: string }[]>(
        `SELECT id::text FROM "${schema}".steps WHERE run_id = $1`,
        [handle.runId],
      );
      if (!step) throw new Error(`run ${handle.runId} has no step`);
      return { runId: handle.runId, stepId: step.id };
    },
    async startWorkflow(input) {
      const handle = await engine.client.start(flow, input);
      runIds.push(handle.runId);
      return { runId: handle.runId };
    },
    async startRun(workflow, input) {
      const handle = await engine.client.start(workflow, input);
      runIds.push(handle.runId);
      return handle;
    },
    waitForClaim(runId, candidates, o = {}) {
      const predicate = (m: ChildMessageOf<'attempt:claimed'>): boolean =>
        m.attempt.runId === runId && m.attempt.token !== o.notToken;
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(
              new Error(`${scenario.name}: no claim of run ${runId} within ${o.timeoutMs ?? 20_000} ms`),
            ),
          o.timeoutMs ?? 20_000,
        );
        const done = (worker: WorkerProcess, claim: ChildMessageOf<'attempt:claimed'>): void => {
          clearTimeout(timer);
          for (const [w, listener] of listeners) w.events.off('attempt:claimed', listener);
          resolve({ worker, claim });
        };
        const listeners = new Map<WorkerProcess, (m: ChildMessageOf<'attempt:claimed'>) => void>();
        for (const w of candidates) {
          const seen = w.all('attempt:claimed', predicate)[0];
          if (seen) return done(w, seen);
        }
        for (const w of candidates) {
          const listener = (m: ChildMessageOf<'attempt:claimed'>): void => {
            if (predicate(m)) done(w, m);
          };
          listeners.set(w, listener);
          w.events.on('attempt:claimed', listener);
        }
      });
    },
    async waitForRunEnd(runId, timeoutMs = 30_000) {
      const status = await poll(
        `the end of run ${runId}`,
        async () => {
          const s = await runStatus(runId);
          return s !== undefined && ['completed', 'failed', 'cancelled'].includes(s) ? s : undefined;
        },
        timeoutMs,
      );
      // The database shows the end before the worker's own report of the completions crosses IPC: wait for
      // the report of each completed step from its (live) worker, so `worker.all(...)` reads are complete.
      const completed = await sql.unsafe<{ token: string; worker_id: string | null }[]>(
        `SELECT fencing_token::text AS token, worker_id FROM "${schema}".steps
          WHERE run_id = $1 AND status = 'completed'`,
        [runId],
      );
      await Promise.all(
        completed.map(async ({ token, worker_id }) => {
          const owner = workers.find((w) => w.workerId === worker_id && alive.has(w));
          await owner
            ?.waitFor('attempt:completed', (m) => m.attempt.token === token, { timeoutMs: 5_000 })
            .catch(() => undefined); // the worker may die or freeze meanwhile; callers check what they need
        }),
      );
      return status;
    },
    poll,
    async sleepUntil(wallMs) {
      const left = wallMs - Date.now();
      if (left > 0) await sleep(left);
    },
    async revoke(stepId) {
      const [row] = await sql.unsafe<{ at_ms: number }[]>(
        `UPDATE "${schema}".steps
            SET fencing_token = nextval('"${schema}".fencing_token_seq'), nonce = gen_random_uuid(),
                worker_id = '${OPERATOR_PREFIX}revoke', lease_expires_at = "${schema}"."now"(),
                next_run_at = "${schema}"."now"()
          WHERE id = $1 AND status = 'running'
          RETURNING (extract(epoch from clock_timestamp()) * 1000)::float8 AS at_ms`,
        [stepId],
      );
      if (!row) throw new Error(`${scenario.name}: revoke found step ${stepId} not running`);
      return row.at_ms;
    },
    async proxy() {
      const url = new URL(server.databaseUrl);
      const proxy = await createTcpProxy(url.hostname, Number(url.port));
      proxies.push(proxy);
      return proxy;
    },
    fault(kind) {
      faults[kind] = (faults[kind] ?? 0) + 1;
    },
    sample(metric, value) {
      (metrics[metric] ??= []).push(value);
    },
    expect(condition, description) {
      if (!condition) failures.push(description);
    },
    history: () => workers.flatMap((w) => w.messages),
  };

  try {
    await scenario.run(ctx, options.iterations);
  } catch (error) {
    failures.push(
      `scenario threw: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
    );
  }

  // Heal: faults end, a healthy worker serves, every run must reach a terminal state.
  for (const p of proxies) p.restore();
  for (const w of alive) w.kill('SIGCONT');
  try {
    if (alive.size === 0) await spawnWorker({ workerId: 'healer' });
    const healMs = 10 * timings.leaseMs + 20_000;
    await poll(
      'every run terminal (heal phase)',
      async () => {
        const [row] = await sql.unsafe<{ open: number }[]>(
          `SELECT count(*)::int AS open FROM "${schema}".runs WHERE status NOT IN ('completed', 'failed', 'cancelled')`,
        );
        return row?.open === 0 ? true : undefined;
      },
      healMs,
    ).catch((error: unknown) => log(`heal: ${(error as Error).message}`));
  } finally {
    await Promise.all(workers.map((w) => w.stop(1_000)));
    await Promise.all(proxies.map((p) => p.close()));
  }

  const history = ctx.history();
  const check = await checkScenario(sql, schema, history);
  if (check.runs !== runIds.length) failures.push(`expected ${runIds.length} runs, the DB has ${check.runs}`);
  await engine.close({ graceMs: 0 });
  await sql.end({ timeout: 5 });

  const report: ScenarioReport = {
    name: scenario.name,
    iterations: options.iterations,
    seed: options.seed,
    durationMs: performance.now() - started,
    faults,
    metrics,
    check,
    failures,
  };
  // CHAOS_KEEP_HISTORY=1 keeps the history of a passing scenario too (to study timings); a failing one always.
  if (!failed(report) && process.env.CHAOS_KEEP_HISTORY !== '1') return report;
  const dir = await mkdtemp(join(tmpdir(), 'palisade-chaos-'));
  const historyFile = join(dir, `${scenario.name.replace(/[^a-z0-9]+/gi, '-')}.jsonl`);
  await writeFile(historyFile, history.map((m) => JSON.stringify(m)).join('\n') + '\n');
  const reasons = [describeViolations(check), ...failures].filter((line) => line !== '');
  if (failed(report))
    log(`${scenario.name} (seed ${options.seed}, schema ${schema}) failed:\n${reasons.join('\n')}`);
  else log(`${scenario.name} (seed ${options.seed}) passed; history kept: ${historyFile}`);
  return { ...report, historyFile };
}

/** Sorted copy; the p-th percentile (nearest rank). */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank] as number;
}
