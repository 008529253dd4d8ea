import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import type { ResolvedWorkerOptions } from '../options.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { activityRunParams } from '../schedules/evaluate-schedules.js';
import { ReadyRotator } from './ready-rotator.js';
import { RetentionSweeper } from './retention-sweeper.js';
import { ScheduleEvaluator } from './schedule-evaluator.js';
import { TableAnalyzer } from './table-analyzer.js';
import { UnservedWorkMonitor } from './unserved-work-monitor.js';
import type { WorkerEvents } from './worker-events.js';

/** What a worker's background tasks need. */
export interface BackgroundTasksOptions {
  readonly db: Database;
  readonly names: SchemaNames;
  readonly logger: Logger;
  readonly events: WorkerEvents;
  readonly options: ResolvedWorkerOptions;
  /** The engine's retention of finished runs (ms); `null`: no sweep. */
  readonly retentionMs: number | null;
}

/**
 * A worker's tasks apart from its claim loop, each on its own timer: the retention sweep (with the engine's
 * `retentionMs`), the schedule evaluation (unless `schedules: false`), the unserved-work check, the rotation of
 * `ready` and, on PostgreSQL, the upkeep of planner statistics where autovacuum is off. Started at once.
 */
export class BackgroundTasks {
  private readonly retention: RetentionSweeper | undefined;
  private readonly schedules: ScheduleEvaluator | undefined;
  private readonly unserved: UnservedWorkMonitor;
  private readonly rotator: ReadyRotator;
  private readonly analyzer: TableAnalyzer | undefined;

  constructor(o: BackgroundTasksOptions) {
    const { db, names, logger, events, options } = o;
    if (o.retentionMs !== null) {
      this.retention = new RetentionSweeper({
        db,
        names,
        retentionMs: o.retentionMs,
        intervalMs: options.retentionSweepIntervalMs,
        events,
        logger,
      });
      this.retention.start();
    }
    if (options.schedules) {
      this.schedules = new ScheduleEvaluator({
        db,
        names,
        pollIntervalMs: options.pollIntervalMs,
        events,
        logger,
        activities: activityRunParams(options.activities.values()),
      });
      this.schedules.start();
    }
    this.unserved = new UnservedWorkMonitor({
      db,
      names,
      workerId: options.workerId,
      pollIntervalMs: options.pollIntervalMs,
      queues: options.queues,
      activityNames: [...options.activities.keys()],
      workflowNames: [...options.workflows.keys()],
      events,
      logger,
    });
    this.unserved.start();
    this.rotator = new ReadyRotator({ db, names, events, logger });
    this.rotator.start();
    if (db.driver === 'postgres') {
      this.analyzer = new TableAnalyzer({ db, names, events, logger });
      this.analyzer.start();
    }
  }

  /** Stop them all, one after another; resolves when none runs and no timer is left. */
  async stop(): Promise<void> {
    await this.retention?.stop();
    await this.unserved.stop();
    await this.schedules?.stop();
    await this.rotator.stop();
    await this.analyzer?.stop();
  }
}
