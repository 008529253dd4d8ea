/**
 * 1. Standalone no-op activities per second: enqueue N (with `enqueueConcurrency` calls in flight), then start a
 * worker of the given concurrency and time from `worker.start()` until its N-th `attempt:completed` event.
 */
import type { WorkCost } from '../costs.js';
import type { PhaseStats, TableCounters } from '../meter.js';
import { noopActivity } from '../definitions.js';
import {
  countdown,
  drain,
  inParallel,
  withEngine,
  workerSettings,
  type ScenarioContext,
  type WorkerSettings,
} from './context.js';

export interface ActivityThroughputResult {
  readonly concurrency: number;
  /** Per-key concurrency the runs were enqueued with (job k under key `k mod keys`), if any. */
  readonly keyed?: KeyedLoad;

  readonly activities: number;
  readonly worker: WorkerSettings;
  readonly enqueue: PhaseStats;
  readonly drain: PhaseStats;
  readonly workerErrors: number;
  /** Step statuses after the run (all `completed` when it went right). */
  readonly stepStatuses: Record<string, number>;
  readonly tables: TableCounters;
  /** Rows, WAL and round trips per unit of work over the engine's lifetime. */
  readonly costs: WorkCost;
}

/** Concurrency keys for a throughput run: `keys` keys, each with `limit` places. */
export interface KeyedLoad {
  readonly keys: number;
  readonly limit: number;
}

export async function activityThroughput(
  ctx: ScenarioContext,
  concurrency: number,
  keyed?: KeyedLoad,
): Promise<ActivityThroughputResult> {
  const { config } = ctx;
  const total = config.activities;
  const noop = noopActivity(config.leaseMs);
  const { result, tables, costs } = await withEngine(
    ctx,
    `act${concurrency}${keyed ? 'k' : ''}`,
    async (run) => {
      const enqueue = await run.phase('enqueue');
      await inParallel(total, config.enqueueConcurrency, (i) =>
        run.engine.client.enqueue(
          noop,
          {},
          keyed ? { concurrency: { key: `tenant-${i % keyed.keys}`, limit: keyed.limit } } : {},
        ),
      );
      const enqueueStats = await enqueue.stop(total);

      const worker = run.engine.worker({
        activities: [noop],
        concurrency,
        pollIntervalMs: config.pollIntervalMs,
      });
      const completed = countdown(total, config.phaseTimeoutMs, `activities at concurrency ${concurrency}`);
      let workerErrors = 0;
      worker.events.on('attempt:completed', () => completed.tick());
      worker.events.on('attempt:failed', ({ failure }) =>
        completed.fail(new Error(`a no-op activity failed: ${failure.message}`)),
      );
      worker.events.on('worker:error', () => workerErrors++);
      const drainStats = await drain(run, worker, completed, total);
      return {
        enqueueStats,
        drainStats,
        workerErrors,
        settings: workerSettings(worker),
        stepStatuses: await run.countBy('steps', 'status'),
      };
    },
  );
  return {
    concurrency,
    ...(keyed ? { keyed } : {}),
    activities: total,
    worker: result.settings,
    enqueue: result.enqueueStats,
    drain: result.drainStats,
    workerErrors: result.workerErrors,
    stepStatuses: result.stepStatuses,
    tables,
    costs,
  };
}
