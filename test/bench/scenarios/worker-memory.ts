/**
 * 8. Worker memory over many steps: a worker runs `memorySteps` no-op activities, fed by this process in chunks
 * so that the backlog stays small (the table grows, the queue does not), and every `memorySampleEvery` completed
 * steps this process's RSS and heap are sampled right after a full GC. Compared: the first sample (after the first
 * K steps, so start-up growth — JIT code, pools, caches — is behind it) with the last. Target: flat within ±10%.
 * The process is the worker and the client at once, as in the other scenarios.
 */
import type { WorkCost } from '../costs.js';
import { noopActivity } from '../definitions.js';
import type { PhaseStats, TableCounters } from '../meter.js';
import { round } from '../stats.js';
import {
  countdown,
  withEngine,
  workerSettings,
  type ScenarioContext,
  type WorkerSettings,
} from './context.js';

export interface MemorySample {
  readonly steps: number;
  readonly rssMiB: number;
  readonly heapUsedMiB: number;
}

export interface WorkerMemoryResult {
  readonly steps: number;
  readonly sampleEvery: number;
  readonly concurrency: number;
  readonly worker: WorkerSettings;
  readonly samples: readonly MemorySample[];
  /** (last RSS − first RSS) / first RSS, in % (target within ±10). */
  readonly rssChangePct: number;
  readonly heapChangePct: number;
  readonly run: PhaseStats;
  readonly workerErrors: number;
  readonly stepStatuses: Record<string, number>;
  readonly tables: TableCounters;
  readonly costs: WorkCost;
}

const mib = (bytes: number) => round(bytes / 2 ** 20, 1);

export async function workerMemory(
  ctx: ScenarioContext,
  collectGarbage: () => void,
): Promise<WorkerMemoryResult> {
  const { config } = ctx;
  const total = config.memorySteps;
  const every = config.memorySampleEvery;
  const concurrency = config.memoryConcurrency;
  // Enqueued ahead of the worker: enough that it never waits for the feeder, few enough to keep the queue short.
  const backlog = Math.max(4 * concurrency, 1_000);
  const noop = noopActivity(config.leaseMs);
  const { result, tables, costs } = await withEngine(ctx, 'mem', async (run) => {
    const worker = run.engine.worker({
      activities: [noop],
      concurrency,
      pollIntervalMs: config.pollIntervalMs,
    });
    const samples: MemorySample[] = [];
    const completed = countdown(
      total,
      config.phaseTimeoutMs * Math.max(1, total / 10_000),
      'memory run steps',
    );
    let workerErrors = 0;
    let wakeFeeder: (() => void) | undefined;
    worker.events.on('attempt:completed', () => {
      completed.tick();
      const n = completed.count;
      if (n % every === 0) {
        // After this handler returns, so the sample does not sit inside the worker's completion path.
        setImmediate(() => {
          collectGarbage();
          const m = process.memoryUsage();
          samples.push({ steps: n, rssMiB: mib(m.rss), heapUsedMiB: mib(m.heapUsed) });
        });
      }
      if (wakeFeeder && n % (backlog / 2) === 0) wakeFeeder();
    });
    worker.events.on('attempt:failed', ({ failure }) =>
      completed.fail(new Error(`a no-op activity failed: ${failure.message}`)),
    );
    worker.events.on('worker:error', () => workerErrors++);

    // A server with autovacuum off (this machine's is) lets a run of 10^6 steps bloat its tables until every
    // claim and completion crawls over dead rows (seen: 1,300 steps/s falling to 200). Vacuum them here instead,
    // once per sample interval, as autovacuum would.
    const [{ autovacuum } = { autovacuum: 'on' }] =
      await ctx.server.admin.unsafe<{ autovacuum: string }[]>('show autovacuum');
    let vacuumedAt = 0;
    const vacuumIfDue = async (): Promise<void> => {
      if (autovacuum === 'on' || completed.count - vacuumedAt < every) return;
      vacuumedAt = completed.count;
      await ctx.server.admin.unsafe(
        `vacuum ${['runs', 'steps', 'attempt_records', 'events'].map((t) => `"${run.schema}"."${t}"`).join(', ')}`,
      );
    };

    const phase = await run.phase('run');
    await worker.start();
    let enqueued = 0;
    const feed = async (): Promise<void> => {
      while (enqueued < total) {
        await vacuumIfDue();
        if (enqueued - completed.count >= backlog) {
          // Wait for the worker to eat into the backlog (woken by a completion, or the run ending in error).
          await Promise.race([new Promise<void>((resolve) => (wakeFeeder = resolve)), completed.done]);
          wakeFeeder = undefined;
          continue;
        }
        // One bulk statement per chunk: single enqueues made the feeder, not the worker, the bottleneck of a
        // run of 10^6 steps (~200 steps/s).
        const chunk = Math.min(backlog / 2, total - enqueued);
        await run.engine.client.enqueueMany(
          noop,
          Array.from({ length: chunk }, () => ({})),
        );
        enqueued += chunk;
      }
    };
    await Promise.all([feed(), completed.done]);
    await new Promise((resolve) => setImmediate(resolve)); // the last sample
    const runStats = await phase.stop(total);
    await worker.stop({ graceMs: 0 });
    return {
      samples,
      runStats,
      workerErrors,
      settings: workerSettings(worker),
      stepStatuses: await run.countBy('steps', 'status'),
    };
  });
  const first = result.samples[0];
  const last = result.samples[result.samples.length - 1];
  const change = (a: number | undefined, b: number | undefined) =>
    a === undefined || b === undefined ? Number.NaN : round((100 * (b - a)) / a, 1);
  return {
    steps: total,
    sampleEvery: every,
    concurrency,
    worker: result.settings,
    samples: result.samples,
    rssChangePct: change(first?.rssMiB, last?.rssMiB),
    heapChangePct: change(first?.heapUsedMiB, last?.heapUsedMiB),
    run: result.runStats,
    workerErrors: result.workerErrors,
    stepStatuses: result.stepStatuses,
    tables,
    costs,
  };
}
