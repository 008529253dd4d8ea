import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { WorkerEvents } from './worker-events.js';

/**
 * A background task of a worker that runs at once and then again after a wait, on its own timer, apart from the
 * claim loop: the retention sweep, the schedule evaluation, the unserved-work check. One run at a time: the next
 * is timed only after the previous settled, by the wait (ms) the run itself returns, so a run that reads when work
 * falls due can come back sooner than its interval. The timer is `unref`'d (it never keeps a process alive). A
 * subclass says what one run does ({@link runOnce}); start and stop are this class's.
 *
 * A run must catch its own errors (they are the task's to log and retry at the next run): one that rejects ends
 * the task.
 */
export abstract class PeriodicTask {
  private timer: NodeJS.Timeout | undefined;
  private current: Promise<void> | undefined;
  private stopped = false;

  /**
   * One run of the task; resolves with the wait (ms) before the next run. `keepGoing()` turns false once
   * {@link stop} was called: a long run (batch after batch) asks it between its steps.
   */
  protected abstract runOnce(keepGoing: () => boolean): Promise<number>;

  /** Run now, then after each run's wait until {@link stop}. Legal once. */
  start(): void {
    this.current = this.tick();
  }

  /** Stop: no timer is left behind; resolves when the run under way (if any) has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.current;
  }

  private async tick(): Promise<void> {
    const waitMs = await this.runOnce(() => !this.stopped);
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.current = this.tick();
    }, waitMs);
    this.timer.unref();
  }
}

/**
 * A {@link PeriodicTask} that does its work only in intervals in which the worker worked — was granted an activity
 * attempt (`attempt:claimed`) or committed a turn (`turn:committed`) — and, with `atStart`, once at start: the
 * rotation of `ready` and the upkeep of planner statistics, which an idle worker has no reason to ask for. A
 * subclass says what one such run does ({@link runWorked}); it must catch its own errors.
 */
export abstract class WorkGatedTask extends PeriodicTask {
  /** Whether the worker worked since the last run (set at start with `atStart`). */
  private worked: boolean;

  constructor(
    /** The worker's database, schema, events (watched for work, and emitted on) and logger. */
    protected readonly p: {
      readonly db: Database;
      readonly names: SchemaNames;
      readonly events: WorkerEvents;
      readonly logger: Logger;
    },
    private readonly intervalMs: number,
    { atStart }: { atStart: boolean },
  ) {
    super();
    this.worked = atStart;
    const worked = (): void => {
      this.worked = true;
    };
    p.events.on('attempt:claimed', worked);
    p.events.on('turn:committed', worked);
  }

  /** One run, in an interval in which the worker worked. */
  protected abstract runWorked(): Promise<void>;

  protected async runOnce(): Promise<number> {
    if (this.worked) {
      this.worked = false;
      await this.runWorked();
    }
    return this.intervalMs;
  }
}
