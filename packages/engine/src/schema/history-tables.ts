import {
  bigint,
  bigserial,
  boolean,
  index,
  integer,
  jsonb,
  type PgSchema,
  text,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

import { ATTEMPT_KINDS, ATTEMPT_OUTCOMES } from '../turn/state-machine.js';
import { oneOf, ts } from './columns.js';

/**
 * A claim of a turn (one row per grant), or of an activity step that ended other than by its own completion: who
 * held which token, and how it ended. An activity's current grant, and one its completion ended, are read off its
 * step row instead; the `attempts` view shows every attempt (migration 0029, which renamed this table from
 * `attempts`; its indexes and sequence keep their names). No foreign keys (migration
 * 0011): every row is inserted by the statement that has just locked and updated the step or run it names, and
 * pruning deletes a run's attempts itself.
 */
export function attemptRecordsTable(schema: PgSchema) {
  return schema.table(
    'attempt_records',
    {
      id: bigserial('id', { mode: 'bigint' }).primaryKey(),
      runId: uuid('run_id').notNull(),
      stepId: uuid('step_id'),
      kind: text('kind').notNull(), // AttemptKind: 'activity' | 'turn'
      attempt: integer('attempt').notNull(),
      epoch: integer('epoch').notNull(),
      fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
      nonce: uuid('nonce').notNull(),
      workerId: text('worker_id').notNull(),
      claimedAt: ts('claimed_at').notNull(),
      /** The token of the attempt whose expired lease this claim took over, if any (for `attempt:claimed`). */
      reclaimedFromToken: bigint('reclaimed_from_token', { mode: 'bigint' }),
      /** The end of the lease the claim granted (DB clock), before any heartbeat (for `attempt:claimed`). */
      grantedUntil: ts('granted_until'),
      endedAt: ts('ended_at'),
      /** AttemptOutcome: completed | failed | lease_expired | rejected_stale | cancelled | timed_out | released; null while open. */
      outcome: text('outcome'),
      error: jsonb('error'),
    },
    (t) => [
      oneOf('attempts_outcome_check', t.outcome, ATTEMPT_OUTCOMES),
      oneOf('attempts_kind_check', t.kind, ATTEMPT_KINDS),
      // attempts_step_id_idx (step_id, epoch) was dropped by migration 0028: nothing reads attempts by step.
      index('attempts_run_id_idx').on(t.runId),
      uniqueIndex('attempts_fencing_token_unique').on(t.fencingToken),
    ],
  );
}

/**
 * Append-only history of each run: what no row holds (a stale write refused, a signal received, a cancel
 * requested, a failure with its data, a timer's due time, …). The `run_events` view (`palisade runs show`,
 * `describe()`, `watch()`) adds the events read off `runs`, `steps` and `attempts` (migrations 0008, 0010, 0023).
 * No foreign key (migration 0023): every row is inserted by a statement that has just inserted or locked its run,
 * and pruning deletes a run's events itself.
 */
export function eventsTable(schema: PgSchema) {
  return schema.table(
    'events',
    {
      id: bigserial('id', { mode: 'bigint' }).primaryKey(),
      runId: uuid('run_id').notNull(),
      stepId: uuid('step_id'),
      type: text('type').notNull(), // colon-namespaced: 'attempt:claimed', 'attempt:stale-rejected', …
      attempt: integer('attempt'),
      epoch: integer('epoch'),
      fencingToken: bigint('fencing_token', { mode: 'bigint' }),
      workerId: text('worker_id'),
      data: jsonb('data'),
      /** True for a step's (or, with no step, the run's) single terminal event. */
      terminal: boolean('terminal').notNull().default(false),
      at: ts('at').notNull(),
    },
    (t) => [
      index('events_run_id_idx').on(t.runId, t.id),
      uniqueIndex('events_one_terminal_per_step')
        .on(t.stepId)
        .where(sql`${t.terminal} AND ${t.stepId} IS NOT NULL`),
      uniqueIndex('events_one_terminal_per_run')
        .on(t.runId)
        .where(sql`${t.terminal} AND ${t.stepId} IS NULL`),
    ],
  );
}

/**
 * Signals sent to workflow runs (`client.signal`), in arrival order (`id`: taken under the run's row lock, so the
 * order is the order the run received them). A signal is pending until a turn of its run hands it to a wait
 * (`ctx.waitForSignal`) and records which step took it (`step_id`), in the turn's fenced commit, or records why
 * none will (`undelivered`: its payload failed the wait's schema, or the run ended first); shown either way. `request_id` makes a send retried after a lost reply store the
 * signal once.
 */
export function signalsTable(schema: PgSchema) {
  return schema.table(
    'signals',
    {
      id: bigserial('id', { mode: 'bigint' }).primaryKey(),
      runId: uuid('run_id').notNull(),
      name: text('name').notNull(),
      payload: jsonb('payload'),
      requestId: uuid('request_id').notNull(),
      createdAt: ts('created_at').notNull(),
      /** The wait step that took the signal; null while pending, and for a signal no wait will take. */
      stepId: uuid('step_id'),
      /** When a wait took the signal, or when it became undelivered; null while pending. */
      consumedAt: ts('consumed_at'),
      /**
       * Why no wait will take the signal, when none will: `{ reason: 'invalid-payload', seq, message }` (the wait at
       * `seq` refused its payload: the schema's message) or `{ reason: 'run-ended', status }` (the run ended first).
       * Null while pending and for a signal a wait took.
       */
      undelivered: jsonb('undelivered'),
    },
    (t) => [
      index('signals_run_id_idx').on(t.runId, t.id),
      uniqueIndex('signals_request_id_unique').on(t.requestId),
    ],
  );
}
