/**
 * 4. Enqueue-to-start latency: with a worker running and idle, enqueue activities at a fixed rate (paced by the
 * clock, not by the previous enqueue returning) and measure, inside `run`, the time since the enqueue call
 * was made. Also reports how long the enqueue calls themselves took, which bounds the part of the latency that
 * is the insert's round trip and commit; the rest is NOTIFY delivery, the claim and the attempt's setup.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { WorkCost } from '../costs.js';
import type { PhaseStats, TableCounters } from '../meter.js';
import { probeNowMs, startProbeActivity } from '../definitions.js';
import { summarize, type LatencySummary } from '../stats.js';
import {
  countdown,
  withEngine,
  workerSettings,
  type ScenarioContext,
  type WorkerSettings,
} from './context.js';

export interface StartLatencyResult {
  readonly activities: number;
  readonly ratePerSec: number;
  readonly warmup: number;
  readonly concurrency: number;
  readonly worker: WorkerSettings;
  /** Enqueue call → start of `run`. */
  readonly enqueueToStart: LatencySummary;
  /** Enqueue call → its promise resolved. */
  readonly enqueueCall: LatencySummary;
  /** Achieved enqueue rate (the pacing is best effort). */
  readonly achievedRatePerSec: number;
  readonly paced: PhaseStats;
  readonly tables: TableCounters;
  /** Rows, WAL and round trips per unit of work over the engine's lifetime. */
  readonly costs: WorkCost;
}

export async function startLatency(ctx: ScenarioContext): Promise<StartLatencyResult> {
  const { config } = ctx;
  let collect = false;
  const latencies: number[] = [];
  const started = countdown(
    config.latencyWarmup + config.latencyActivities,
    config.phaseTimeoutMs,
    'enqueue-to-start probes',
  );
  const completed = countdown(
    config.latencyWarmup + config.latencyActivities,
    config.phaseTimeoutMs,
    'enqueue-to-start probes completed',
  );
  const probe = startProbeActivity(config.leaseMs, (ms) => {
    if (collect) latencies.push(ms);
    started.tick();
  });
  const { result, tables, costs } = await withEngine(ctx, 'lat', async (run) => {
    const worker = run.engine.worker({
      activities: [probe],
      concurrency: config.latencyConcurrency,
      pollIntervalMs: config.pollIntervalMs,
    });
    worker.events.on('attempt:completed', () => completed.tick());
    await worker.start();
    const enqueueMs: number[] = [];
    const pending: Promise<unknown>[] = [];
    const intervalMs = 1000 / config.latencyRatePerSec;

    const paced = async (count: number): Promise<number> => {
      const t0 = performance.now();
      for (let i = 0; i < count; i++) {
        const wait = t0 + i * intervalMs - performance.now();
        if (wait > 0) await sleep(wait);
        const enqueuedAtMs = probeNowMs();
        pending.push(
          run.engine.client.enqueue(probe, { enqueuedAtMs }).then(() => {
            if (collect) enqueueMs.push(probeNowMs() - enqueuedAtMs);
          }),
        );
      }
      return performance.now() - t0;
    };

    await paced(config.latencyWarmup);
    await Promise.all(pending.splice(0));
    // Let the warm-up probes start before timed ones are sent, so none of them is counted.
    while (started.count < config.latencyWarmup) await Promise.race([sleep(5), started.done]);
    collect = true;
    const phase = await run.phase('paced');
    const sendingMs = await paced(config.latencyActivities);
    await Promise.all(pending);
    await started.done;
    const pacedStats = await phase.stop(config.latencyActivities);
    await completed.done; // stop only once every completion is recorded (stop() would abort those in flight)
    await worker.stop({ graceMs: 0 });
    return { enqueueMs, pacedStats, sendingMs, settings: workerSettings(worker) };
  });
  return {
    activities: config.latencyActivities,
    ratePerSec: config.latencyRatePerSec,
    warmup: config.latencyWarmup,
    concurrency: config.latencyConcurrency,
    worker: result.settings,
    enqueueToStart: summarize(latencies),
    enqueueCall: summarize(result.enqueueMs),
    achievedRatePerSec:
      config.latencyActivities > 1
        ? Math.round(((config.latencyActivities - 1) * 1000) / Math.max(result.sendingMs, 1))
        : config.latencyRatePerSec,
    paced: result.pacedStats,
    tables,
    costs,
  };
}
