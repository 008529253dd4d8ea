/**
 * 3. Per-step overhead: the p50 start→result latency of a sequential 3-step no-op workflow minus that of a
 * 0-step one, divided by 3. One workflow at a time on an otherwise idle worker, after a warm-up; the two kinds
 * are interleaved so that drift (autovacuum, checkpoints) hits both alike.
 *
 * Each 3-step sample is also cut into hops by the worker's events (turn committed, step claimed/started/
 * completed), so the report can say where the time between `start()` and `result()` goes.
 */
import type { WorkCost } from '../costs.js';
import type { PhaseStats, TableCounters } from '../meter.js';
import { noopActivity, sequentialWorkflow } from '../definitions.js';
import { summarize, round, type LatencySummary } from '../stats.js';
import { withEngine, workerSettings, type ScenarioContext, type WorkerSettings } from './context.js';
import type { Engine } from '@palisade/engine';

const STEPS = 3;

export interface Hop {
  /** `from → to`, e.g. `turn committed → step claimed`. */
  readonly hop: string;
  readonly p50Ms: number;
  readonly meanMs: number;
}

export interface StepOverheadResult {
  readonly steps: number;
  readonly samples: number;
  readonly warmup: number;
  readonly worker: WorkerSettings;
  readonly zeroStep: LatencySummary;
  readonly threeStep: LatencySummary;
  /** (p50 of 3-step − p50 of 0-step) / 3 */
  readonly overheadPerStepMs: number;
  /** Median time of each hop of a 3-step run (samples whose events came in the expected order). */
  readonly hops: readonly Hop[];
  readonly hopSamples: number;
  readonly sampling: PhaseStats;
  readonly tables: TableCounters;
  /** Rows, WAL and round trips per unit of work over the engine's lifetime. */
  readonly costs: WorkCost;
}

type Mark = readonly [label: string, atMs: number];

export async function stepOverhead(ctx: ScenarioContext): Promise<StepOverheadResult> {
  const { config } = ctx;
  const noop = noopActivity(config.leaseMs);
  const zero = sequentialWorkflow(0, noop);
  const three = sequentialWorkflow(STEPS, noop);
  const { result, tables, costs } = await withEngine(ctx, 'ovh', async (run) => {
    const worker = run.engine.worker({
      activities: [noop],
      workflows: [zero, three],
      turnLeaseMs: config.turnLeaseMs,
      pollIntervalMs: config.pollIntervalMs,
    });
    let marks: Mark[] = [];
    const mark = (label: string) => marks.push([label, performance.now()]);
    worker.events.on('turn:committed', ({ outcome }) => mark(`turn ${outcome}`));
    worker.events.on('attempt:claimed', () => mark('step claimed'));
    worker.events.on('attempt:started', () => mark('step started'));
    worker.events.on('attempt:completed', () => mark('step completed'));
    await worker.start();

    const once = async (engine: Engine, which: 0 | 3): Promise<number> => {
      marks = [];
      const started = performance.now();
      mark('start() called');
      const handle = await engine.client.start(which === 0 ? zero : three, {});
      mark('start() returned');
      await handle.result({ timeoutMs: config.phaseTimeoutMs });
      mark('result() returned');
      return performance.now() - started;
    };

    for (let i = 0; i < config.overheadWarmup; i++) {
      await once(run.engine, 0);
      await once(run.engine, 3);
    }
    const zeroMs: number[] = [];
    const threeMs: number[] = [];
    const timelines: Mark[][] = [];
    const sampling = await run.phase('sampling');
    for (let i = 0; i < config.overheadSamples; i++) {
      zeroMs.push(await once(run.engine, 0));
      threeMs.push(await once(run.engine, 3));
      timelines.push(marks);
    }
    const samplingStats = await sampling.stop(2 * config.overheadSamples);
    await worker.stop({ graceMs: 0 });
    return { zeroMs, threeMs, timelines, samplingStats, settings: workerSettings(worker) };
  });
  const zeroStep = summarize(result.zeroMs);
  const threeStep = summarize(result.threeMs);
  const { hops, samples: hopSamples } = hopBreakdown(result.timelines);
  return {
    steps: STEPS,
    samples: config.overheadSamples,
    warmup: config.overheadWarmup,
    worker: result.settings,
    zeroStep,
    threeStep,
    overheadPerStepMs: round((threeStep.p50Ms - zeroStep.p50Ms) / STEPS),
    hops,
    hopSamples,
    sampling: result.samplingStats,
    tables,
    costs,
  };
}

/** The labels of a 3-step timeline when everything happened in order, which is what the hops are cut from. */
function expectedShape(): string[] {
  const shape = ['start() called', 'start() returned', 'turn blocked'];
  for (let i = 0; i < STEPS; i++) {
    shape.push(
      'step claimed',
      'step started',
      'step completed',
      i === STEPS - 1 ? 'turn completed' : 'turn blocked',
    );
  }
  shape.push('result() returned');
  return shape;
}

function hopBreakdown(timelines: readonly Mark[][]): { hops: Hop[]; samples: number } {
  const shape = expectedShape();
  const wellFormed = timelines.filter(
    (t) => t.length === shape.length && t.every(([label], i) => label === shape[i]),
  );
  const hops: Hop[] = [];
  for (let i = 1; i < shape.length; i++) {
    const gaps = wellFormed.map((t) => (t[i] as Mark)[1] - (t[i - 1] as Mark)[1]);
    const summary = summarize(gaps);
    hops.push({ hop: `${shape[i - 1]} → ${shape[i]}`, p50Ms: summary.p50Ms, meanMs: summary.meanMs });
  }
  return { hops, samples: wellFormed.length };
}
