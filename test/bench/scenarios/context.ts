/** What every scenario shares: a fresh engine on its own schema, phase meters, and waiting for N events. */
import { createEngine, type Engine, type Worker } from '@palisade/engine';
import type { BenchConfig } from '../config.js';
import { openCostWindow, type WorkCost } from '../costs.js';
import type { BenchServer } from '../database.js';
import { openCountedClient, type CountedClient } from '../engine-client.js';
import { startPhase, tableCounters, type PhaseStats, type TableCounters } from '../meter.js';
import { NotificationCounter, installStatementProfiler } from '../profiler.js';

export interface ScenarioContext {
  readonly config: BenchConfig;
  readonly server: BenchServer;
  /** PostgreSQL runs on this machine (its CPU can be read from /proc). */
  readonly localServer: boolean;
}

export interface EngineRun {
  readonly engine: Engine;
  readonly schema: string;
  /** The engine's postgres.js client: statements sent, application_name. */
  readonly client: CountedClient;
  /** Start measuring a phase; stop it with the number of items it completed. */
  phase(name: string): Promise<{ stop(items: number): Promise<PhaseStats> }>;
  /** `select <column>, count(*) … group by 1` on one of the engine's tables, for verification. */
  countBy(table: 'runs' | 'steps', column: 'status' | 'kind'): Promise<Record<string, number>>;
}

/** The settings a worker actually resolved (defaults filled), for the report. */
export interface WorkerSettings {
  readonly concurrency: number;
  readonly workflowConcurrency: number;
  readonly pollIntervalMs: number;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly turnLeaseMs: number;
  /** Lease and local safety margin of the (first) activity served. */
  readonly leaseMs: number | undefined;
  readonly leaseSafetyMarginMs: number | undefined;
}

export function workerSettings(worker: Worker): WorkerSettings {
  const o = worker.options;
  const timing = [...o.timings.values()][0];
  return {
    concurrency: o.concurrency,
    workflowConcurrency: o.workflowConcurrency,
    pollIntervalMs: o.pollIntervalMs,
    heartbeatIntervalMs: o.heartbeatIntervalMs,
    heartbeatTimeoutMs: o.heartbeatTimeoutMs,
    turnLeaseMs: o.turnLeaseMs,
    leaseMs: timing?.leaseMs,
    leaseSafetyMarginMs: timing?.safetyMarginMs,
  };
}

/** A scenario's result with the row operations of its whole engine run, per table, and its cost per unit. */
export interface WithTableCounters<T> {
  readonly result: T;
  readonly tables: TableCounters;
  /** From the end of the migrations until the engine was closed (costs.ts). */
  readonly costs: WorkCost;
}

/**
 * Run `fn` with a fresh, migrated engine on a new schema; close it and drop the schema afterwards. The engine runs
 * on a client made here (engine-client.ts) so that its statements are counted and its backends can be found.
 */
export async function withEngine<T>(
  ctx: ScenarioContext,
  prefix: string,
  fn: (run: EngineRun) => Promise<T>,
): Promise<WithTableCounters<T>> {
  const { config, server } = ctx;
  const schema = server.newSchema(prefix);
  let engine: Engine | undefined;
  const client = openCountedClient(server.url, { poolSize: config.poolSize, applicationName: schema });
  const notifications = new NotificationCounter();
  try {
    engine = await createEngine({ sql: client.sql, schema });
    if (config.profile) installStatementProfiler(engine.database);
    await notifications.start(server.admin, engine.names.channel);
    const costs = await openCostWindow(server.admin, client, schema);
    const meterOptions = { admin: server.admin, schema, localServer: ctx.localServer, notifications, client };
    const result = await fn({
      engine,
      schema,
      client,
      phase: (name) => startPhase(name, meterOptions),
      async countBy(table, column) {
        const rows = await server.admin.unsafe<{ key: string; n: number }[]>(
          `select ${column} as key, count(*)::int as n from "${schema}"."${table}" group by 1 order by 1`,
        );
        return Object.fromEntries(rows.map((r) => [r.key, r.n]));
      },
    });
    await engine.close({ graceMs: 0 });
    engine = undefined;
    await client.end();
    await notifications.stop();
    const workCost = await costs.close(); // waits until the engine's backends have reported their counts
    return { result, tables: await tableCounters(server.admin, schema), costs: workCost };
  } finally {
    await engine?.close({ graceMs: 0 }).catch(() => undefined);
    await client.end().catch(() => undefined);
    await notifications.stop().catch(() => undefined);
    await server.dropSchema(schema);
  }
}

/**
 * A promise that resolves (with the time of the last tick) once `tick()` was called `target` times, and rejects
 * after `timeoutMs` with how far it got, or at once when `fail(error)` is called.
 */
export function countdown(
  target: number,
  timeoutMs: number,
  what: string,
): { tick(): void; fail(error: unknown): void; readonly count: number; done: Promise<number> } {
  let count = 0;
  let resolve!: (at: number) => void;
  let reject!: (error: unknown) => void;
  const done = new Promise<number>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const timer = setTimeout(
    () => reject(new Error(`${what}: only ${count} of ${target} after ${timeoutMs} ms`)),
    timeoutMs,
  );
  void done.then(
    () => clearTimeout(timer),
    () => clearTimeout(timer),
  );
  return {
    tick() {
      if (++count === target) resolve(performance.now());
    },
    fail(error) {
      reject(error);
    },
    get count() {
      return count;
    },
    done,
  };
}

/**
 * The drain phase of a throughput scenario: start `worker` on the work already queued, wait for `completed` to
 * count all `total` items, stop the phase there (its stats cover `total` items), then stop the worker with no
 * grace. Rejects as `completed.done` does (a failed item, or its timeout).
 */
export async function drain(
  run: EngineRun,
  worker: Worker,
  completed: { readonly done: Promise<number> },
  total: number,
): Promise<PhaseStats> {
  const phase = await run.phase('drain');
  await worker.start();
  await completed.done;
  const stats = await phase.stop(total);
  await worker.stop({ graceMs: 0 });
  return stats;
}

/** Call `task` `total` times with at most `parallel` calls in flight; rejects on the first failure. */
export async function inParallel(total: number, parallel: number, task: (i: number) => Promise<unknown>) {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < total) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(parallel, total) }, lane));
}
