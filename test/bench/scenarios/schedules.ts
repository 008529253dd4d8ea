/**
 * 9. The cost of evaluating schedules: `BENCH_SCHEDULES` (10,000) schedules all due at once — half a cron
 * expression (`* * * * *`, UTC), half an interval (1 min), catch-up `latest`, each starting a workflow run nobody
 * serves — evaluated by one `engine.schedules.evaluate()` (what a worker does on its timer): read in batches of
 * SCHEDULE_BATCH_SIZE, ticks computed with croner, one firing statement per batch. Then the clock is moved a
 * minute and three evaluations race for the same due schedules (three workers), which must still start exactly
 * one run per schedule and tick. Reports time per schedule and schedules per second of each.
 *
 * The schedules are inserted by one SQL statement (not `schedules.create`, whose cost is not what is measured),
 * with the row shape `create` writes, their first tick one minute in the past by the database clock.
 */
import { sql } from 'drizzle-orm';
import { advanceClock } from '@palisade/engine/testing';
import type { PhaseStats } from '../meter.js';
import { round } from '../stats.js';
import { withEngine, type ScenarioContext, type WithTableCounters } from './context.js';

export interface ScheduleEvaluationResult {
  readonly schedules: number;
  /** One evaluator, every schedule due once. */
  readonly single: PhaseStats;
  readonly singleMsPerSchedule: number;
  /** Three evaluators at once, every schedule due once more. */
  readonly contended: PhaseStats;
  readonly contendedMsPerSchedule: number;
  /** Runs created over both rounds (must be 2 × schedules). */
  readonly runs: number;
  readonly duplicateTicks: number;
}

export async function scheduleEvaluation(
  ctx: ScenarioContext,
): Promise<WithTableCounters<ScheduleEvaluationResult>> {
  const n = ctx.config.schedules;
  return withEngine(ctx, 'sched', async (run) => {
    const { engine } = run;
    const s = engine.names;
    await engine.database.rows(sql`
      INSERT INTO ${s.schedules} (id, cron, every_ms, timezone, target_kind, target_name, input, run_options,
                                  overlap, catchup, next_tick_at, created_at, updated_at)
      SELECT 'bench-' || g, CASE WHEN g % 2 = 0 THEN '* * * * *' END, CASE WHEN g % 2 = 1 THEN 60000 END, 'UTC',
             'workflow', 'bench-scheduled', jsonb_build_object('g', g), '{"queue":"default","priority":0}'::jsonb,
             'allow-all', '{"kind":"latest"}'::jsonb,
             date_trunc('minute', ${s.now}) - interval '1 minute', ${s.now}, ${s.now}
        FROM generate_series(1, ${n}) g`);
    await engine.database.rows(sql.raw(`ANALYZE "${run.schema}"."schedules"`));

    const single = await run.phase('schedules: one evaluator');
    const first = await engine.schedules.evaluate();
    const singleStats = await single.stop(first.runsCreated);
    if (first.runsCreated !== n)
      throw new Error(`one evaluator started ${first.runsCreated} runs for ${n} schedules`);

    await advanceClock(engine, 60_000);
    const contended = await run.phase('schedules: three evaluators');
    const raced = await Promise.all([1, 2, 3].map(() => engine.schedules.evaluate()));
    const created = raced.reduce((sum, r) => sum + r.runsCreated, 0);
    const contendedStats = await contended.stop(created);
    if (created !== n) throw new Error(`three evaluators started ${created} runs for ${n} schedules`);

    const [counts] = await engine.database.rows<{ runs: number; distinct_ticks: number }>(sql`
      SELECT count(*)::int AS runs, count(DISTINCT (schedule_id, schedule_tick_at))::int AS distinct_ticks
        FROM ${s.runs} WHERE schedule_id IS NOT NULL`);
    return {
      schedules: n,
      single: singleStats,
      singleMsPerSchedule: round(singleStats.wallMs / n, 4),
      contended: contendedStats,
      contendedMsPerSchedule: round(contendedStats.wallMs / n, 4),
      runs: counts?.runs ?? 0,
      duplicateTicks: (counts?.runs ?? 0) - (counts?.distinct_ticks ?? 0),
    };
  });
}
