import { sql, type SQL } from 'drizzle-orm';
import { endedRunItems, notifyOnce } from '../notify.js';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';

/**
 * The commit's wake-ups, sent at COMMIT in one NOTIFY (`notified`; notify.ts). Takes no lock.
 */
export function wakeUpCte(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { ending, startsChildren } = plan;
  return sql`
    -- Wake-ups, sent at COMMIT in one NOTIFY: workers of the new activities' queues, the run's queue when its
    -- next turn is due now, the run's waiters when it ended and a handle.result() waits on it, and, when it goes
    -- on, its watchers (a handle.watch() waits on it now: one NOTIFY item per turn, for watched runs only).
    ${notifyOnce(
      n,
      'notified',
      sql`SELECT 'step:' || queue FROM inserted WHERE kind = 'activity' AND status = 'scheduled'
          UNION ALL SELECT 'turn:' || queue FROM run_row WHERE due_now
          UNION ALL ${endedRunItems(n, sql`(SELECT * FROM run_row WHERE ${ending}) x`)}
          -- A run under a concurrency key that ends gives its place to a pending run of its key (flow-control.ts).
          UNION ALL SELECT 'turn:' || queue FROM run_row WHERE ${ending} AND concurrency_key IS NOT NULL
          UNION ALL SELECT 'watch:' || id::text FROM run_row WHERE NOT ${ending} AND ${n.runWatched}(id, true)${
            startsChildren ? sql` UNION ALL SELECT 'turn:' || queue FROM children` : sql``
          }${
            ending
              ? sql` UNION ALL SELECT 'turn:' || queue FROM parent_woken UNION ALL SELECT 'turn:' || queue FROM cascaded`
              : sql``
          }`,
    )}`;
}
