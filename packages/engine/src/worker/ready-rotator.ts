import { classifyDatabaseError } from '../infra-retry.js';
import { READY_ROTATION_INTERVAL_MS, READY_ROTATION_MIN_BYTES } from '../options.js';
import { rotateReady } from '../queries/rotate-ready.js';
import { WorkGatedTask } from './periodic-task.js';

/**
 * A worker's turn of the ring of `ready` (STORAGE.md §3.6): every `READY_ROTATION_INTERVAL_MS` in which the worker
 * moved `ready` rows — it was granted an activity attempt (claimed, prefetched or eager) or committed a turn, which
 * may have queued activities — it asks `<schema>.ready_rotate` for one rotation, which happens only when the current
 * slot is at least that old and holds `READY_ROTATION_MIN_BYTES` of heap; another worker rotating, or a partition a
 * long transaction holds, makes it skip until the next interval. An idle worker asks nothing: `ready` churns only
 * where some worker works, and that worker turns the ring. Apart from the claim loop, like the retention sweep: a
 * claim never waits for it longer than the rotation's 50 ms `lock_timeout`. Each answer is a `ready:rotation`
 * event; a failed call is logged and retried at the next interval.
 */
export class ReadyRotator extends WorkGatedTask {
  constructor(p: WorkGatedTask['p']) {
    super(p, READY_ROTATION_INTERVAL_MS, { atStart: false });
  }

  /** One request. */
  protected async runWorked(): Promise<void> {
    const { db, names, events, logger } = this.p;
    try {
      const outcome = await rotateReady(db, names, {
        minIntervalMs: READY_ROTATION_INTERVAL_MS,
        minBytes: READY_ROTATION_MIN_BYTES,
      });
      if (outcome === 'rotated' || outcome === 'locked') logger.debug({ outcome }, 'ready:rotation');
      events.emit('ready:rotation', { outcome });
    } catch (error) {
      logger.warn({ err: error, class: classifyDatabaseError(error) }, 'ready:rotation-failed');
      events.emit('worker:error', { error });
    }
  }
}
