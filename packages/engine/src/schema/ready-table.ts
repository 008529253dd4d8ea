import { boolean, index, integer, type PgSchema, smallint, text, uuid } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';
import { ts } from './columns.js';

/**
 * The claimable set of activity steps (issue 28, STORAGE.md §3.2): one row per `scheduled` or `running` activity
 * step with a due time, deleted when the step ends. Scheduling state only — a claim locks the steps row and
 * re-checks it there — so that the wide `steps` row carries no claim state in an index key and its hot updates
 * are HOT.
 *
 * Kept by the `steps_ready_insert` / `_update` / `_delete` triggers on `steps` (migration 0024), so no statement
 * that writes a step can forget it: `due_at` is always `<schema>.ready_due(step)` — `next_run_at`, or for a running
 * step that is to be expired rather than reclaimed (`expiring`: cancel requested, no attempts left) the earlier
 * of that and its lease end. No foreign key. `PARTITION BY LIST (slot)` with one partition, `ready_0`, in the
 * migration (drizzle does not express partitioning; slots are for the rotation of STORAGE.md §3.6).
 */
export function readyTable(schema: PgSchema) {
  return schema.table(
    'ready',
    {
      slot: smallint('slot').notNull().default(0),
      queue: text('queue').notNull(),
      priority: integer('priority').notNull(),
      dueAt: ts('due_at').notNull(),
      name: text('name').notNull(),
      stepId: uuid('step_id').notNull(),
      runId: uuid('run_id').notNull(),
      /** The step is running and is to be ended by `expireSteps` when its lease expires, never reclaimed. */
      expiring: boolean('expiring').notNull().default(false),
    },
    (t) => [
      // The claim's order; `name` and `step_id` in the key so that a claim filters by activity without a heap
      // visit and the triggers find a step's row by its exact key.
      index('ready_claim_order_idx').on(t.queue, t.priority.desc().nullsFirst(), t.dueAt, t.name, t.stepId),
      index('ready_expiring_idx')
        .on(t.dueAt)
        .where(sql`${t.expiring}`),
    ],
  );
}
