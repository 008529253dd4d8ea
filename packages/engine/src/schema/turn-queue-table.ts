import { index, integer, type PgSchema, text, uuid } from 'drizzle-orm/pg-core';

import { ts } from './columns.js';

/**
 * The claimable workflow turns (issue 28 item 3, STORAGE.md §3.2): one row per live workflow run whose turn is due
 * now or later (`due_at` = `runs.turn_next_run_at`) or held under a lease (`due_at` = the lease's end, when a claim
 * may take the turn over), and no other. Kept by the triggers `runs_turn_queue_*` (migration 0025) in the statement
 * that writes the run row, so the run's own updates that move its turn are HOT: `turn_next_run_at` is in no index of
 * `runs`. Scheduling state only: the turn claim (claim-turns.ts) picks rows in claim order, locks the run row and
 * judges the turn on it, and deletes a stale row it meets. No foreign key: a run's delete removes its row by trigger.
 */
export function turnQueueTable(schema: PgSchema) {
  return schema.table(
    'turn_queue',
    {
      queue: text('queue').notNull(),
      priority: integer('priority').notNull(),
      dueAt: ts('due_at').notNull(),
      runId: uuid('run_id').notNull(),
      /** The workflow's name: a claim skips the turns of workflows its worker does not run without locking them. */
      name: text('name').notNull(),
    },
    (t) => [
      // The claim's order (priority, then due time); with run_id, the whole key of a row, by which the triggers
      // find a run's row (the table has no other index).
      index('turn_queue_claim_order_idx').on(t.queue, t.priority.desc().nullsFirst(), t.dueAt, t.runId),
    ],
  );
}

/** The `turn_queue` table's type. */
export type TurnQueueTable = ReturnType<typeof turnQueueTable>;
