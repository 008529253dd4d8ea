import { bigint, boolean, index, jsonb, type PgSchema, text, uuid } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

import { RUN_KINDS } from '../turn/state-machine.js';
import { oneOf, ts } from './columns.js';

/**
 * Durable schedules (`engine.schedules`): a cron expression (croner, in `timezone`) or a fixed interval
 * (`every_ms`), and the run each tick starts. `next_tick_at` is the next tick not yet fired, by the database
 * clock; every write to a row bumps `version`, and the statement that fires ticks moves a row forward only
 * where `version` is still the one its evaluator read (compare-and-set), so of several evaluators one wins.
 */
export function schedulesTable(schema: PgSchema) {
  return schema.table(
    'schedules',
    {
      id: text('id').primaryKey(),
      /** The cron expression, or null for an interval schedule. */
      cron: text('cron'),
      /** The interval in ms, or null for a cron schedule. */
      everyMs: bigint('every_ms', { mode: 'number' }),
      /** IANA time zone the cron expression is read in. */
      timezone: text('timezone').notNull(),
      targetKind: text('target_kind').notNull(), // RunKind: 'workflow' | 'activity'
      targetName: text('target_name').notNull(),
      input: jsonb('input'),
      /** Resolved run parameters: queue, priority (and for an activity its retry policy, lease, timeout). */
      runOptions: jsonb('run_options').notNull(),
      overlap: text('overlap').notNull(), // 'skip' | 'buffer-one' | 'allow-all' | 'cancel-previous'
      /** `{"kind":"none"}`, `{"kind":"latest"}` or `{"kind":"all","windowMs":n}`. */
      catchup: jsonb('catchup').notNull(),
      paused: boolean('paused').notNull().default(false),
      nextTickAt: ts('next_tick_at').notNull(),
      version: bigint('version', { mode: 'number' }).notNull().default(1),
      /** The run the latest fired tick started (the one overlap policies look at). */
      lastRunId: uuid('last_run_id'),
      lastTickAt: ts('last_tick_at'),
      /** buffer-one: the tick waiting for the last run to end, or null. */
      bufferedTickAt: ts('buffered_tick_at'),
      /** Ticks that fired no run: skipped by the overlap policy or by catch-up. */
      skippedTicks: bigint('skipped_ticks', { mode: 'number' }).notNull().default(0),
      createdAt: ts('created_at').notNull(),
      updatedAt: ts('updated_at').notNull(),
    },
    (t) => [
      oneOf('schedules_target_kind_check', t.targetKind, RUN_KINDS),
      // The evaluator's read: due schedules in due order, off the index.
      index('schedules_due_idx')
        .on(t.nextTickAt)
        .where(sql`NOT ${t.paused}`),
      index('schedules_buffered_idx')
        .on(t.bufferedTickAt)
        .where(sql`${t.bufferedTickAt} IS NOT NULL AND NOT ${t.paused}`),
    ],
  );
}
