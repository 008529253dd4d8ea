import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { classifyDatabaseError } from '../infra-retry.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { ActivityRunParams } from '../queries/fire-schedule-ticks.js';
import { evaluateDueSchedules } from '../schedules/evaluate-schedules.js';
import { PeriodicTask } from './periodic-task.js';
import type { WorkerEvents } from './worker-events.js';

/** Shortest wait between evaluations when due schedules were left to another evaluator (ms). */
const CONTENDED_WAIT_MS = 50;

/**
 * A worker's schedule evaluation (`WorkerOptions.schedules`): at start, then again when the earliest next tick
 * falls due by the database clock, and at least every poll interval (no NOTIFY: a schedule created or changed
 * elsewhere is seen within one interval). It runs apart from the claim loop, like the retention sweep, so claims
 * never wait for it. Every worker of every engine may evaluate at once: no leader, no lease — the firing statement
 * makes each tick's run exactly once (see fireScheduleTicks). A failed evaluation is logged and tried again at the
 * next interval. Emits `schedules:evaluated` after each evaluation that read due schedules. `stop()` ends an
 * evaluation under way after its current statement.
 */
export class ScheduleEvaluator extends PeriodicTask {
  constructor(
    private readonly p: {
      readonly db: Database;
      readonly names: SchemaNames;
      readonly pollIntervalMs: number;
      readonly events: WorkerEvents;
      readonly logger: Logger;
      /** The worker's activity definitions: the runs of schedules of these activities get their parameters. */
      readonly activities: ActivityRunParams;
    },
  ) {
    super();
  }

  /** One evaluation; resolves with the wait before the next. */
  protected async runOnce(keepGoing: () => boolean): Promise<number> {
    const { db, names, pollIntervalMs, events, logger, activities } = this.p;
    let waitMs = pollIntervalMs;
    try {
      const done = await evaluateDueSchedules(db, names, {
        keepGoing,
        activities,
      });
      for (const r of done.refused) logger.error({ schedule: r.id, error: r.error }, 'schedules:refused');
      if (done.evaluated > 0) {
        const { evaluated, applied, runsCreated, nextDueInMs } = done;
        events.emit('schedules:evaluated', { evaluated, applied, runsCreated, nextDueInMs });
      }
      if (done.nextDueInMs !== null) {
        // Due again at once only when this evaluation moved every schedule it read: one left to another
        // evaluator (its row locked or moved on) is retried shortly, not in a tight loop; one it refused stays
        // due, and waits for the next poll.
        const floor =
          done.refused.length > 0 ? pollIntervalMs : done.applied === done.evaluated ? 0 : CONTENDED_WAIT_MS;
        waitMs = Math.min(pollIntervalMs, Math.max(floor, Math.ceil(done.nextDueInMs)));
      }
    } catch (error) {
      logger.warn({ err: error, class: classifyDatabaseError(error) }, 'schedules:evaluation-failed');
      events.emit('worker:error', { error });
    }
    return waitMs;
  }
}
