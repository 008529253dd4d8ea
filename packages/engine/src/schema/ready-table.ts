import {
  boolean,
  check,
  index,
  integer,
  type PgSchema,
  primaryKey,
  smallint,
  text,
  uuid,
} from 'drizzle-orm/pg-core';
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
 * of that and its lease end. No foreign key. `PARTITION BY LIST (slot)`, partitions `ready_0` … `ready_3` (migrations
 * 0024 and 0026; drizzle does not express partitioning): the rotation of STORAGE.md §3.6 (`<schema>.ready_rotate`)
 * empties the oldest slot into the current one, truncates it and makes it current.
 */
export function readyTable(schema: PgSchema) {
  return schema.table(
    'ready',
    {
      /** The partition; an insert names none and lands in the current slot (`<schema>.ready_slot()`, the ring's). */
      slot: smallint('slot')
        .notNull()
        .default(sql.raw(`"${schema.schemaName}"."ready_slot"()`)),
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

/**
 * The ring of `ready`'s slots (migration 0026, STORAGE.md §3.6): one row, the slot new `ready` rows go to and when it
 * became current (the server's `clock_timestamp()`, not the engine's clock). Written only by `<schema>.ready_rotate`.
 */
export function readyRingTable(schema: PgSchema) {
  return schema.table(
    'ready_ring',
    {
      id: boolean('id').notNull().default(true),
      currentSlot: smallint('current_slot').notNull(),
      rotatedAt: ts('rotated_at').notNull(),
    },
    (t) => [
      primaryKey({ columns: [t.id] }),
      check('ready_ring_id_check', sql`${t.id}`),
      check('ready_ring_current_slot_check', sql`${t.currentSlot} BETWEEN 0 AND 3`),
    ],
  );
}
