import { bigint, index, integer, jsonb, type PgSchema, text, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

import { LIVE_RUN_STATUSES, RUN_KINDS, RUN_STATUSES, sqlList } from '../turn/state-machine.js';
import { oneOf, ts, uuid7Id } from './columns.js';

/**
 * One execution of a workflow, or the envelope of a standalone activity (`kind = 'activity'`). Stored with
 * `fillfactor = 40` (migration 0025; drizzle cannot declare a table's storage parameters), so that a run's hot-path
 * versions fit on its page and its updates stay HOT.
 */
export function runsTable(schema: PgSchema) {
  return schema.table(
    'runs',
    {
      id: uuid7Id(schema),
      kind: text('kind').notNull(), // RunKind: 'workflow' | 'activity'
      name: text('name').notNull(),
      status: text('status').notNull(), // RunStatus: 'pending' | 'running' | 'completed' | 'failed' | 'cancelled'
      input: jsonb('input'),
      output: jsonb('output'),
      error: jsonb('error'),
      /** The last `ctx.setProgress` value of a workflow run, recorded by its turns' commits. */
      progress: jsonb('progress'),
      idempotencyKey: text('idempotency_key'),
      parentRunId: uuid('parent_run_id'),
      parentStepId: uuid('parent_step_id'),
      queue: text('queue').notNull(),
      priority: integer('priority').notNull().default(0),
      /**
       * Per-key concurrency of a workflow run (`start`'s `concurrency`): a `pending` run's first turn is claimed only
       * while fewer than `concurrency_limit` runs of its workflow with this key are `running` (see claim-turns.ts).
       */
      concurrencyKey: text('concurrency_key'),
      concurrencyLimit: integer('concurrency_limit'),
      /**
       * `concurrency_key` while the run is live (`pending` or `running`), else null: what `runs_live_concurrency_key_idx`
       * indexes, so that a key's count reads its live runs only, never the finished ones (issue 26). Generated, so no
       * statement keeps it; an unkeyed run's stays null, so its status changes remain HOT updates.
       */
      liveConcurrencyKey: text('live_concurrency_key').generatedAlwaysAs(
        sql`CASE WHEN status IN ${sql.raw(sqlList(LIVE_RUN_STATUSES))} THEN concurrency_key END`,
      ),
      cancelRequestedAt: ts('cancel_requested_at'),
      cancelReason: text('cancel_reason'),
      // The workflow turn's own lease: a turn is an attempt (DESIGN.md §4, last paragraph).
      /**
       * When the run's next turn is due (null: none is, the run waits on its steps or a signal, or it ended). In no
       * index: `turn_queue` holds the claim's order, kept by triggers (turn-queue-table.ts).
       */
      turnNextRunAt: ts('turn_next_run_at'),
      turnAttempt: integer('turn_attempt').notNull().default(0),
      turnEpoch: integer('turn_epoch').notNull().default(0),
      turnToken: bigint('turn_token', { mode: 'bigint' }),
      turnNonce: uuid('turn_nonce'),
      turnWorkerId: text('turn_worker_id'),
      turnLeaseExpiresAt: ts('turn_lease_expires_at'),
      /** Bumped by every wake-up (a step ended, a cancel), so a turn that committed after one keeps the run due. */
      wakeCount: integer('wake_count').notNull().default(0),
      /** The schedule whose tick (or trigger, or backfill) created this run, or null. */
      scheduleId: text('schedule_id'),
      /** The tick of `schedule_id` this run is for, by the database clock. */
      scheduleTickAt: ts('schedule_tick_at'),
      createdAt: ts('created_at').notNull().defaultNow(),
      startedAt: ts('started_at'),
      finishedAt: ts('finished_at'),
    },
    (t) => [
      oneOf('runs_status_check', t.status, RUN_STATUSES),
      oneOf('runs_kind_check', t.kind, RUN_KINDS),
      // Exactly one run per (schedule, tick): the statement that fires ticks inserts with ON CONFLICT DO NOTHING,
      // so no evaluator, backfill or retry can make a second run for a tick, whatever else went wrong.
      uniqueIndex('runs_schedule_tick_unique')
        .on(t.scheduleId, t.scheduleTickAt)
        .where(sql`${t.scheduleId} IS NOT NULL`),
      // A key is scoped to the workflow or activity it starts (kind + name): the same key may start one run of each.
      // Only keyed runs are indexed (migration 0022): an unkeyed job costs no entry here. Every reader names the key
      // with `=` (which implies IS NOT NULL), and the inserts' ON CONFLICT DO NOTHING names no target (it checks
      // every unique index): an ON CONFLICT that named these columns would have to repeat this predicate.
      uniqueIndex('runs_kind_name_idempotency_key_unique')
        .on(t.kind, t.name, t.idempotencyKey)
        .where(sql`${t.idempotencyKey} IS NOT NULL`),
      // Not (status, created_at): a run's status changes on its hot path, and an indexed column would make those
      // updates write every index of the table (migration 0008).
      index('runs_created_at_idx').on(t.createdAt),
      // No index reads `turn_next_run_at`: the claimable turns are the rows of `turn_queue` (turn-queue-table.ts),
      // which triggers keep in step with it, so the updates that move a run's turn are HOT (migration 0025).
      // Only child runs are indexed (migration 0022); every reader names the parent with `=`.
      index('runs_parent_run_id_idx')
        .on(t.parentRunId)
        .where(sql`${t.parentRunId} IS NOT NULL`),
      // The live runs of one concurrency key, for the turn claim's count of those running. Not status in the
      // predicate: a run's status changes on its hot path, and a column in an index predicate would end the HOT
      // updates of every run; the generated column changes only for keyed runs.
      index('runs_live_concurrency_key_idx')
        .on(t.name, t.liveConcurrencyKey)
        .where(sql`${t.liveConcurrencyKey} IS NOT NULL`),
    ],
  );
}

/** The `runs` table's type. */
export type RunsTable = ReturnType<typeof runsTable>;
