/**
 * 2. Three-step no-op workflows per second: start N runs (with `enqueueConcurrency` calls in flight), then start
 * a worker serving the workflow and its activity, and time from `worker.start()` until N turns committed with
 * outcome `completed`. Each run is four turns (three that schedule a step, one that returns) and three activities.
 */
import type { WorkCost } from '../costs.js';
import type { PhaseStats, TableCounters } from '../meter.js';
import { noopActivity, sequentialWorkflow } from '../definitions.js';
import {
  countdown,
  drain,
  inParallel,
  withEngine,
  workerSettings,
  type ScenarioContext,
  type WorkerSettings,
} from './context.js';

export const WORKFLOW_STEPS = 3;

export interface WorkflowThroughputResult {
  readonly workflows: number;
  readonly steps: number;
  readonly activityConcurrency: number;
  readonly turnConcurrency: number;
  readonly worker: WorkerSettings;
  readonly start: PhaseStats;
  readonly drain: PhaseStats;
  readonly turnsCommitted: number;
  readonly workerErrors: number;
  readonly runStatuses: Record<string, number>;
  readonly tables: TableCounters;
  /** Rows, WAL and round trips per unit of work over the engine's lifetime. */
  readonly costs: WorkCost;
}

export async function workflowThroughput(ctx: ScenarioContext): Promise<WorkflowThroughputResult> {
  const { config } = ctx;
  const total = config.workflows;
  const noop = noopActivity(config.leaseMs);
  const workflow = sequentialWorkflow(WORKFLOW_STEPS, noop);
  const { result, tables, costs } = await withEngine(ctx, 'wf', async (run) => {
    const start = await run.phase('start');
    await inParallel(total, config.enqueueConcurrency, () => run.engine.client.start(workflow, {}));
    const startStats = await start.stop(total);

    const worker = run.engine.worker({
      activities: [noop],
      workflows: [workflow],
      concurrency: config.workflowActivityConcurrency,
      workflowConcurrency: config.workflowTurnConcurrency,
      turnLeaseMs: config.turnLeaseMs,
      pollIntervalMs: config.pollIntervalMs,
    });
    const completed = countdown(total, config.phaseTimeoutMs, `${WORKFLOW_STEPS}-step workflows`);
    let turnsCommitted = 0;
    let workerErrors = 0;
    worker.events.on('turn:committed', ({ outcome }) => {
      turnsCommitted++;
      if (outcome === 'completed') completed.tick();
      else if (outcome !== 'blocked') completed.fail(new Error(`a no-op workflow ended ${outcome}`));
    });
    worker.events.on('worker:error', () => workerErrors++);
    const drainStats = await drain(run, worker, completed, total);
    return {
      startStats,
      drainStats,
      turnsCommitted,
      workerErrors,
      settings: workerSettings(worker),
      runStatuses: await run.countBy('runs', 'status'),
    };
  });
  return {
    workflows: total,
    steps: WORKFLOW_STEPS,
    activityConcurrency: config.workflowActivityConcurrency,
    turnConcurrency: config.workflowTurnConcurrency,
    worker: result.settings,
    start: result.startStats,
    drain: result.drainStats,
    turnsCommitted: result.turnsCommitted,
    workerErrors: result.workerErrors,
    runStatuses: result.runStatuses,
    tables,
    costs,
  };
}
