import type { Database } from '../db/database.js';
import { faultHooks } from '../internal/fault-points.js';
import type { ActivityDefinition } from '@palisade/sdk';
import {
  fireScheduleTicks,
  type ActivityRunParams,
  type FiredTicks,
  type ScheduleFiring,
} from '../queries/fire-schedule-ticks.js';
import { cancelInTransaction } from '../queries/request-cancel.js';
import { readDueSchedules, type DueScheduleRow } from '../queries/schedule-rows.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { dueTicks, type TickSpec } from './schedule-ticks.js';
import { uuid7 } from '../turn/uuid7.js';

/** Schedules read and fired per statement by an evaluation. */
export const SCHEDULE_BATCH_SIZE = 500;

/** What one evaluation did. */
export interface ScheduleEvaluation {
  /** Due schedules it read (and decided on). */
  readonly evaluated: number;
  /** Schedules whose row it moved forward (the others another evaluator or a change got first). */
  readonly applied: number;
  /** Runs it created. */
  readonly runsCreated: number;
  /** How long until the earliest next tick by the database clock (ms; ≤ 0: due now), or null: no schedule. */
  readonly nextDueInMs: number | null;
  /**
   * Due schedules whose ticks could not be computed (a stored cron expression this croner refuses): left as they
   * are, so one bad row never stops the others; the worker logs them.
   */
  readonly refused: readonly { readonly id: string; readonly error: string }[];
}

/** The tick spec of a schedule row. */
export function tickSpecOf(row: {
  cron: string | null;
  every_ms: number | null;
  timezone: string;
}): TickSpec {
  return row.cron !== null
    ? { kind: 'cron', cron: row.cron, timezone: row.timezone }
    : { kind: 'every', everyMs: Number(row.every_ms) };
}

/** The parameters a standalone run of `activity` gets, as `client.enqueue` gives them without options. */
export function activityRunParamsOf(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  activity: ActivityDefinition<any, any>,
): ActivityRunParams extends ReadonlyMap<string, infer P> ? P : never {
  return {
    retryPolicy: activity.retry,
    leaseMs: activity.leaseMs,
    startToCloseTimeoutMs: activity.startToCloseTimeoutMs,
    rateLimit: activity.rateLimit ?? null,
  };
}

/** {@link activityRunParamsOf} of each of `activities`, by name. */
export function activityRunParams(
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  activities: Iterable<ActivityDefinition<any, any>>,
): ActivityRunParams {
  return new Map([...activities].map((a) => [a.name, activityRunParamsOf(a)]));
}

/** The firing an evaluator decides for one due schedule read at database time `nowMs`. */
function decide(row: DueScheduleRow, nowMs: number): ScheduleFiring {
  const due = row.due
    ? dueTicks(tickSpecOf(row), row.catchup, Number(row.next_tick_ms), nowMs)
    : { ticks: [], nextTickMs: undefined };
  // A buffered tick (buffer-one) goes first: it is older than every tick due now.
  const buffered = row.buffered_tick_ms === null ? [] : [Number(row.buffered_tick_ms)];
  return {
    id: row.id,
    version: Number(row.version),
    ticks: [...buffered, ...due.ticks].map((tickMs) => ({ tickMs, runId: uuid7() })),
    ...(due.nextTickMs === undefined ? {} : { nextTickMs: due.nextTickMs }),
    manual: false,
  };
}

/**
 * Fire `firings` in one statement; when it asks to cancel runs (overlap `cancel-previous`), in one transaction
 * with those cancels, so a tick's new run never commits without the cancel of the run it replaces.
 */
export async function applyFirings(
  db: Database,
  n: SchemaNames,
  firings: readonly ScheduleFiring[],
  mayCancel: boolean,
  activities?: ActivityRunParams,
): Promise<FiredTicks> {
  if (!mayCancel) return fireScheduleTicks(db, n, firings, activities);
  return db.transaction(async (tx) => {
    const fired = await fireScheduleTicks(tx, n, firings, activities);
    for (const c of fired.cancel) {
      await cancelInTransaction(tx, n, {
        runId: c.runId,
        reason: `schedule ${c.scheduleId} started its next run (overlap: cancel-previous)`,
      });
    }
    return fired;
  });
}

/**
 * Evaluate due schedules once, as every worker does on its schedule timer: read the due schedules in batches of
 * {@link SCHEDULE_BATCH_SIZE} (database time with them), decide each one's ticks by its catch-up policy, fire
 * them with one statement per batch (see fireScheduleTicks), and go on while batches come back full and
 * `keepGoing()` says so. Safe to run in any number of processes at once: a schedule's row moves forward once per
 * version, and a tick's run is one by a unique index. A failed statement fires nothing of its batch; the next
 * evaluation reads the rows again.
 * @throws the database's error when a read or a firing fails.
 */
export async function evaluateDueSchedules(
  db: Database,
  n: SchemaNames,
  p: {
    keepGoing?: () => boolean;
    batchSize?: number;
    /** The definitions of the activities this process serves: their runs get these parameters. */
    activities?: ActivityRunParams;
  } = {},
): Promise<ScheduleEvaluation> {
  const batchSize = p.batchSize ?? SCHEDULE_BATCH_SIZE;
  let evaluated = 0;
  let applied = 0;
  let runsCreated = 0;
  const refused: { id: string; error: string }[] = [];
  for (;;) {
    const due = await readDueSchedules(db, n, { limit: batchSize });
    if (due.rows.length > 0) {
      const firings: ScheduleFiring[] = [];
      for (const row of due.rows) {
        try {
          firings.push(decide(row, due.nowMs));
        } catch (error) {
          refused.push({ id: row.id, error: error instanceof Error ? error.message : String(error) });
        }
      }
      await faultHooks['schedules:before-fire']?.(firings.map((f) => f.id));
      const mayCancel = due.rows.some((r) => r.overlap === 'cancel-previous');
      const fired = await applyFirings(db, n, firings, mayCancel, p.activities);
      evaluated += due.rows.length;
      applied += fired.applied.length;
      runsCreated += fired.runs.length;
      // A full batch that was applied: more may be due. One that others got first: they are on it.
      if (due.rows.length === batchSize && fired.applied.length > 0 && (p.keepGoing?.() ?? true)) continue;
    }
    return { evaluated, applied, runsCreated, nextDueInMs: due.nextDueInMs, refused };
  }
}
