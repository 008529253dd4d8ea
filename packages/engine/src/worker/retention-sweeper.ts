import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { classifyDatabaseError } from '../infra-retry.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { pruneFinishedRuns } from '../retention.js';
import { PeriodicTask } from './periodic-task.js';
import type { WorkerEvents } from './worker-events.js';

/**
 * A worker's retention sweep (`createEngine({ retentionMs })`): at start and then every `retentionSweepIntervalMs`
 * (default `RETENTION_SWEEP_INTERVAL_MS`), delete finished runs older than the retention, batch after batch until
 * a batch comes back short. It runs apart from the claim loop, not in its maintenance tick: a first sweep over a
 * long history may take many batches, and claims must not wait for it. Several workers sweeping at once share the
 * work (each batch skips runs another holds). A failed sweep is logged and tried again at the next interval.
 * Emits `retention:pruned` after each sweep, with what it deleted (zero counts included). `stop()` ends the sweep
 * under way after its current batch.
 */
export class RetentionSweeper extends PeriodicTask {
  constructor(
    private readonly p: {
      readonly db: Database;
      readonly names: SchemaNames;
      readonly retentionMs: number;
      readonly intervalMs: number;
      readonly events: WorkerEvents;
      readonly logger: Logger;
    },
  ) {
    super();
  }

  /** One sweep; resolves with the wait before the next. */
  protected async runOnce(keepGoing: () => boolean): Promise<number> {
    const { db, names, retentionMs, events, logger } = this.p;
    try {
      const pruned = await pruneFinishedRuns(db, names, {
        olderThanMs: retentionMs,
        untilEmpty: false,
        keepGoing,
      });
      if (pruned.runs > 0) logger.info({ ...pruned, retentionMs }, 'retention:pruned');
      events.emit('retention:pruned', { ...pruned, olderThanMs: retentionMs });
    } catch (error) {
      logger.warn({ err: error, class: classifyDatabaseError(error) }, 'retention:failed');
      events.emit('worker:error', { error });
    }
    return this.p.intervalMs;
  }
}
