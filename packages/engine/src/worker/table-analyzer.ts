import { classifyDatabaseError } from '../infra-retry.js';
import { TABLE_ANALYZE_CHECK_INTERVAL_MS } from '../options.js';
import { analyzeStaleTables } from '../queries/analyze-stale-tables.js';
import { WorkGatedTask } from './periodic-task.js';

/**
 * A worker's upkeep of the planner statistics of the engine's tables where autovacuum does not keep them
 * ({@link analyzeStaleTables}): at start, before its connections have planned much, and then every
 * `TABLE_ANALYZE_CHECK_INTERVAL_MS` in which the worker was granted an attempt or committed a turn, it analyzes the
 * tables that changed by more than 50 rows plus their row estimate since their last analyze. An idle worker asks
 * nothing after the first check. Not more often: an analyze makes every session re-plan every statement on the
 * table (five custom plans each before a generic one is kept again), which a check every 2 s cost a short run
 * 10–20 % of its jobs/s; plans made on an empty table are the ones that hurt, and they are replaced at the first
 * check after the table grew. PostgreSQL only: on PGlite the task is not started. Each check is a
 * `tables:analyzed` event (with the tables analyzed, often none); a failed check is logged and retried at the next
 * interval.
 */
export class TableAnalyzer extends WorkGatedTask {
  constructor(p: WorkGatedTask['p']) {
    super(p, TABLE_ANALYZE_CHECK_INTERVAL_MS, { atStart: true });
  }

  /** One check. */
  protected async runWorked(): Promise<void> {
    const { db, names, events, logger } = this.p;
    try {
      const tables = await analyzeStaleTables(db, names);
      if (tables.length > 0) logger.debug({ tables }, 'tables:analyzed');
      events.emit('tables:analyzed', { tables });
    } catch (error) {
      logger.warn({ err: error, class: classifyDatabaseError(error) }, 'tables:analyze-failed');
      events.emit('worker:error', { error });
    }
  }
}
