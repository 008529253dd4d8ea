import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { classifyDatabaseError } from '../infra-retry.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { readUnservedWork, type UnservedWork } from '../queries/unclaimed-work.js';
import { PeriodicTask } from './periodic-task.js';
import type { WorkerEvents } from './worker-events.js';

/** Least time between two looks for due work the worker does not register (it looks at every poll otherwise). */
export const UNSERVED_CHECK_MIN_INTERVAL_MS = 1_000;
/** How often the same unserved activity or workflow on a queue is logged again while its work stays due. */
export const UNSERVED_WARN_REPEAT_MS = 10 * 60_000;
/** Names read per kind and check. */
const UNSERVED_READ_LIMIT = 100;

/**
 * Tells the operator, at once, that a run needs what this worker lacks (issue 26: a worker without an activity a
 * run needed said nothing for 60 s, and then nothing that named the cause). At start and then at every poll interval
 * (at least {@link UNSERVED_CHECK_MIN_INTERVAL_MS} apart) it reads the due work on the worker's queues whose activity or workflow the
 * worker does not register, and logs a `worker:unserved-work` warning naming the kind, the name and the queue
 * (and emits the event of that name): once per (kind, name, queue), again after {@link UNSERVED_WARN_REPEAT_MS}
 * if it is still due. Another worker may serve it (workers of one queue may register different names): the
 * warning says so. Its own timer, apart from the claim loop, so that a worker of workflows only checks too; a
 * failed read is logged at debug level and tried at the next interval.
 */
export class UnservedWorkMonitor extends PeriodicTask {
  /** When each `kind:name@queue` was last warned about (monotonic ms). */
  private readonly warnedAt = new Map<string, number>();

  constructor(
    private readonly p: {
      readonly db: Database;
      readonly names: SchemaNames;
      readonly workerId: string;
      readonly pollIntervalMs: number;
      readonly queues: readonly string[];
      readonly activityNames: readonly string[];
      readonly workflowNames: readonly string[];
      readonly events: WorkerEvents;
      readonly logger: Logger;
    },
  ) {
    super();
  }

  /** One check; resolves with the wait before the next. */
  protected async runOnce(): Promise<number> {
    const { db, names, queues, activityNames, workflowNames, logger } = this.p;
    try {
      const unserved = await readUnservedWork(db, names, {
        queues,
        activityNames,
        workflowNames,
        limit: UNSERVED_READ_LIMIT,
      });
      const now = performance.now();
      for (const work of unserved) {
        const key = `${work.kind}:${work.name}@${work.queue}`;
        const last = this.warnedAt.get(key);
        if (last !== undefined && now - last < UNSERVED_WARN_REPEAT_MS) continue;
        this.warnedAt.set(key, now);
        this.warn(work);
      }
    } catch (error) {
      logger.debug({ err: error, class: classifyDatabaseError(error) }, 'worker:unserved-check-failed');
    }
    return Math.max(this.p.pollIntervalMs, UNSERVED_CHECK_MIN_INTERVAL_MS);
  }

  private warn(work: UnservedWork): void {
    const { workerId, activityNames, workflowNames, logger, events } = this.p;
    const registered = work.kind === 'activity' ? activityNames : workflowNames;
    const list = registered.length === 0 ? 'none' : registered.slice(0, 20).join(', ');
    const message =
      `${work.kind} ${work.name} has work due on queue ${work.queue}, and worker ${workerId} does not register ` +
      `it (its ${work.kind === 'activity' ? 'activities' : 'workflows'}: ${list}); unless another worker of ` +
      `queue ${work.queue} registers ${work.kind} ${work.name}, the runs that need it wait forever`;
    logger.warn(
      { workerId, kind: work.kind, name: work.name, queue: work.queue, message },
      'worker:unserved-work',
    );
    events.emit('worker:unserved-work', { workerId, ...work });
  }
}
