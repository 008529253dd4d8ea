/**
 * 6. One long sequential workflow (1,000 no-op steps by default): does a step get slower as the run's history
 * grows? Every turn replays the run from the top over its recorded steps, so a turn late in the run reads and
 * matches far more history than an early one. Compared: the time its first W steps took and the time its last W
 * steps took (W = 100 by default), from the steps table on the database clock: from the creation of the window's
 * first step (the turn that scheduled it committed) to the finish of its last. Target: last / first ≤ 1.5.
 */
import type { WorkCost } from '../costs.js';
import { noopActivity, sequentialWorkflow } from '../definitions.js';
import type { PhaseStats, TableCounters } from '../meter.js';
import { round } from '../stats.js';
import { withEngine, workerSettings, type ScenarioContext, type WorkerSettings } from './context.js';

export interface LongWorkflowResult {
  readonly steps: number;
  readonly window: number;
  readonly worker: WorkerSettings;
  /** Creation of step 1 → finish of step W. */
  readonly firstWindowMs: number;
  /** Creation of step N−W+1 → finish of step N. */
  readonly lastWindowMs: number;
  /** lastWindowMs / firstWindowMs (target ≤ 1.5). */
  readonly ratio: number;
  /** start() → result(), as the client saw it. */
  readonly run: PhaseStats;
  readonly runStatuses: Record<string, number>;
  readonly tables: TableCounters;
  readonly costs: WorkCost;
}

export async function longWorkflow(ctx: ScenarioContext): Promise<LongWorkflowResult> {
  const { config } = ctx;
  const steps = config.longWorkflowSteps;
  const w = config.longWorkflowWindow;
  const noop = noopActivity(config.leaseMs);
  const workflow = sequentialWorkflow(steps, noop);
  const { result, tables, costs } = await withEngine(ctx, 'long', async (run) => {
    const worker = run.engine.worker({
      activities: [noop],
      workflows: [workflow],
      turnLeaseMs: config.turnLeaseMs,
      pollIntervalMs: config.pollIntervalMs,
    });
    await worker.start();
    const phase = await run.phase('run');
    const handle = await run.engine.client.start(workflow, {});
    await handle.result({ timeoutMs: config.phaseTimeoutMs });
    const runStats = await phase.stop(steps);
    await worker.stop({ graceMs: 0 });
    // Steps in the order the workflow made them; window k spans [k, k + w).
    const [row] = await ctx.server.admin.unsafe<{ first_ms: number; last_ms: number }[]>(
      `with s as (
         select created_at, finished_at, row_number() over (order by seq) as i
           from "${run.schema}".steps where kind = 'activity' and retired_at is null)
       select extract(epoch from (select finished_at from s where i = $1)
                                - (select created_at from s where i = 1)) * 1000 as first_ms,
              extract(epoch from (select finished_at from s where i = $2)
                                - (select created_at from s where i = $3)) * 1000 as last_ms`,
      [w, steps, steps - w + 1],
    );
    return {
      firstMs: Number(row?.first_ms),
      lastMs: Number(row?.last_ms),
      runStats,
      settings: workerSettings(worker),
      runStatuses: await run.countBy('runs', 'status'),
    };
  });
  return {
    steps,
    window: w,
    worker: result.settings,
    firstWindowMs: round(result.firstMs, 1),
    lastWindowMs: round(result.lastMs, 1),
    ratio: round(result.lastMs / result.firstMs),
    run: result.runStats,
    runStatuses: result.runStatuses,
    tables,
    costs,
  };
}
