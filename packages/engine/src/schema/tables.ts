import {
  bigint,
  bigserial,
  boolean,
  index,
  integer,
  jsonb,
  pgSchema,
  text,
  timestamp,
  unique,
  uniqueIndex,
  uuid,
} from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

/** Name of the Postgres schema the migrations are generated for; replaced by the configured name when applied. */
export const DEFAULT_SCHEMA = 'palisade';

const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/**
 * The engine's tables in Postgres schema `schemaName` (DESIGN.md §3). Column units are in their names
 * (`*_ms` integers, `*_at` timestamptz); every lease and due-time comparison reads `<schema>.now()`.
 */
export function defineTables(schemaName: string) {
  const schema = pgSchema(schemaName);

  /** One global sequence for every fencing token: strictly increasing, never reused. */
  const fencingTokenSeq = schema.sequence('fencing_token_seq', { startWith: 1, increment: 1 });

  /** One execution of a workflow, or the envelope of a standalone activity (`kind = 'activity'`). */
  const runs = schema.table(
    'runs',
    {
      id: uuid('id').primaryKey().defaultRandom(),
      kind: text('kind').notNull(), // 'workflow' | 'activity'
      name: text('name').notNull(),
      status: text('status').notNull(), // 'pending' | 'running' | 'completed' | 'failed' | 'cancelled'
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
        sql`CASE WHEN status IN ('pending', 'running') THEN concurrency_key END`,
      ),
      cancelRequestedAt: ts('cancel_requested_at'),
      cancelReason: text('cancel_reason'),
      // The workflow turn's own lease: a turn is an attempt (DESIGN.md §4, last paragraph).
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
      // Exactly one run per (schedule, tick): the statement that fires ticks inserts with ON CONFLICT DO NOTHING,
      // so no evaluator, backfill or retry can make a second run for a tick, whatever else went wrong.
      uniqueIndex('runs_schedule_tick_unique')
        .on(t.scheduleId, t.scheduleTickAt)
        .where(sql`${t.scheduleId} IS NOT NULL`),
      // A key is scoped to the workflow or activity it starts (kind + name): the same key may start one run of each.
      unique('runs_kind_name_idempotency_key_unique').on(t.kind, t.name, t.idempotencyKey),
      // Not (status, created_at): a run's status changes on its hot path, and an indexed column would make those
      // updates write every index of the table (migration 0008).
      index('runs_created_at_idx').on(t.createdAt),
      index('runs_turn_due_idx')
        .on(t.queue, t.turnNextRunAt)
        .where(sql`${t.turnNextRunAt} IS NOT NULL`),
      // The turn claim's order (priority, then due time): the claim reads due runs off the index and stops at
      // its LIMIT instead of sorting every pending turn of the queue.
      index('runs_turn_claim_order_idx')
        .on(t.queue, t.priority.desc().nullsFirst(), t.turnNextRunAt)
        .where(sql`${t.turnNextRunAt} IS NOT NULL`),
      index('runs_parent_run_id_idx').on(t.parentRunId),
      // The live runs of one concurrency key, for the turn claim's count of those running. Not status in the
      // predicate: a run's status changes on its hot path, and a column in an index predicate would end the HOT
      // updates of every run; the generated column changes only for keyed runs.
      index('runs_live_concurrency_key_idx')
        .on(t.name, t.liveConcurrencyKey)
        .where(sql`${t.liveConcurrencyKey} IS NOT NULL`),
    ],
  );

  /**
   * One durable call of a run: an activity call, timer, signal wait or child run, at position `seq`. No foreign
   * key to its run (migration 0011): a step is inserted only by the statement that inserts its run or holds its
   * run's row locked, and pruning deletes a run's steps itself.
   */
  const steps = schema.table(
    'steps',
    {
      id: uuid('id').primaryKey().defaultRandom(),
      runId: uuid('run_id').notNull(),
      seq: integer('seq').notNull(),
      kind: text('kind').notNull(), // 'activity' | 'timer' | 'signal' | 'child'
      name: text('name').notNull(),
      status: text('status').notNull(), // 'scheduled' | 'running' | 'completed' | 'failed' | 'cancelled'
      input: jsonb('input'),
      output: jsonb('output'),
      error: jsonb('error'),
      queue: text('queue').notNull(),
      priority: integer('priority').notNull().default(0),
      /**
       * Per-key concurrency (`concurrency` of `enqueue` / `ctx.run`): a `scheduled` step is claimed only while fewer
       * than `concurrency_limit` steps of its activity with this key are `running` (see claim-steps.ts).
       */
      concurrencyKey: text('concurrency_key'),
      concurrencyLimit: integer('concurrency_limit'),
      /** Per-key rate limit: at most `rate_limit` claims of its activity with this key per `rate_period_ms`. */
      rateKey: text('rate_key'),
      rateLimit: integer('rate_limit'),
      ratePeriodMs: integer('rate_period_ms'),
      /** Claims charged to the retry budget (a fenced release is not charged). */
      attempt: integer('attempt').notNull().default(0),
      /** Every claim, shown to humans; never decreases. */
      epoch: integer('epoch').notNull().default(0),
      fencingToken: bigint('fencing_token', { mode: 'bigint' }),
      /**
       * The unit of work this step's tokens fence (DESIGN.md §1, invariant 13): `run:<run id>/seq:<seq>`, or
       * `run:<run id>` for a standalone run; copied from the retired row it replaces when a retry re-creates the
       * position, so every attempt of one unit of work, whichever row it ran under, shares one scope. Rows
       * written before migration 0005 keep their original `step:<step id>` so fences recorded under it still
       * hold.
       */
      fencingScope: text('fencing_scope').notNull(),
      nonce: uuid('nonce'),
      claimRequestId: uuid('claim_request_id'),
      workerId: text('worker_id'),
      retryPolicy: jsonb('retry_policy').notNull(),
      leaseMs: integer('lease_ms').notNull(),
      startToCloseTimeoutMs: integer('start_to_close_timeout_ms').notNull(),
      /** Backoff before the step may be reclaimed after this attempt's lease expires; set at claim. */
      reclaimDelayMs: integer('reclaim_delay_ms').notNull().default(0),
      /** When the row next becomes claimable: due time when scheduled, lease expiry + reclaim delay when running. */
      nextRunAt: ts('next_run_at'),
      leaseExpiresAt: ts('lease_expires_at'),
      attemptDeadlineAt: ts('attempt_deadline_at'),
      heartbeatDetails: jsonb('heartbeat_details'),
      lastHeartbeatAt: ts('last_heartbeat_at'),
      lastFencedWriteAt: ts('last_fenced_write_at'),
      /** Nonce of the attempt whose outcome was last recorded, so a retried completion or failure is recognised. */
      endedNonce: uuid('ended_nonce'),
      cancelRequestedAt: ts('cancel_requested_at'),
      /** Order in which workflow turns delivered this step's outcome to the code; replay repeats it. */
      deliveredSeq: integer('delivered_seq'),
      /**
       * How many outcomes the workflow code had been handed (the highest `delivered_seq` it had seen) when it
       * scheduled this step; 0 for steps scheduled before any. A retry that withdraws delivery k retires the
       * steps scheduled after it (`after_delivered_seq >= k`): they belong to the branch that saw the failure.
       */
      afterDeliveredSeq: integer('after_delivered_seq').notNull().default(0),
      /** Set when a retry withdrew this step from the run's history; kept for the record, never replayed. */
      retiredAt: ts('retired_at'),
      createdAt: ts('created_at').notNull().defaultNow(),
      startedAt: ts('started_at'),
      finishedAt: ts('finished_at'),
    },
    (t) => [
      // One live step per position; retired steps keep their rows (and attempts, events) beside the new ones.
      uniqueIndex('steps_run_id_seq_live_unique')
        .on(t.runId, t.seq)
        .where(sql`${t.retiredAt} IS NULL`),
      index('steps_claimable_idx')
        .on(t.queue, t.nextRunAt)
        .where(sql`${t.status} IN ('scheduled', 'running')`),
      // The claim's order (priority, then due time): the claim reads due steps off the index and stops at its
      // LIMIT instead of sorting the queue's whole backlog (20,000 due steps: ~50 ms → under 1 ms per claim).
      index('steps_claim_order_idx')
        .on(t.queue, t.priority.desc().nullsFirst(), t.nextRunAt)
        .where(sql`${t.status} IN ('scheduled', 'running')`),
      index('steps_running_lease_idx')
        .on(t.leaseExpiresAt)
        .where(sql`${t.status} = 'running'`),
      index('steps_run_id_idx').on(t.runId),
      // The running steps of one concurrency key, counted by every claim that would add one (status is in the
      // predicates of the claim indexes already, so this costs the hot path no HOT update).
      index('steps_concurrency_running_idx')
        .on(t.name, t.concurrencyKey)
        .where(sql`${t.concurrencyKey} IS NOT NULL AND ${t.status} = 'running'`),
      // The live steps under a flow-control key, read by the retention sweep to find the keys no work holds.
      index('steps_flow_keyed_live_idx')
        .on(t.name)
        .where(
          sql`(${t.concurrencyKey} IS NOT NULL OR ${t.rateKey} IS NOT NULL) AND ${t.status} IN ('scheduled', 'running')`,
        ),
    ],
  );

  /**
   * One row per claim of a step or turn: who held which token, and how it ended. No foreign keys (migration
   * 0011): every row is inserted by the statement that has just locked and updated the step or run it names, and
   * pruning deletes a run's attempts itself.
   */
  const attempts = schema.table(
    'attempts',
    {
      id: bigserial('id', { mode: 'bigint' }).primaryKey(),
      runId: uuid('run_id').notNull(),
      stepId: uuid('step_id'),
      kind: text('kind').notNull(), // 'activity' | 'turn'
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
      /** completed | failed | lease_expired | rejected_stale | cancelled | timed_out | released */
      outcome: text('outcome'),
      error: jsonb('error'),
    },
    (t) => [
      index('attempts_step_id_idx').on(t.stepId, t.epoch),
      index('attempts_run_id_idx').on(t.runId),
      uniqueIndex('attempts_fencing_token_unique').on(t.fencingToken),
    ],
  );

  /** Append-only history of each run, the source of `palisade runs show`. */
  const events = schema.table(
    'events',
    {
      id: bigserial('id', { mode: 'bigint' }).primaryKey(),
      runId: uuid('run_id')
        .notNull()
        .references(() => runs.id, { onDelete: 'cascade' }),
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

  /** For the fenced-resource helper: the highest token accepted per scope. */
  const fences = schema.table('fences', {
    scope: text('scope').primaryKey(),
    token: bigint('token', { mode: 'bigint' }).notNull(),
    updatedAt: ts('updated_at').notNull(),
  });

  /**
   * Signals sent to workflow runs (`client.signal`), in arrival order (`id`: taken under the run's row lock, so the
   * order is the order the run received them). A signal is pending until a turn of its run hands it to a wait
   * (`ctx.waitForSignal`) and records which step took it (`step_id`), in the turn's fenced commit, or records why
   * none will (`undelivered`: its payload failed the wait's schema, or the run ended first); shown either way. `request_id` makes a send retried after a lost reply store the
   * signal once.
   */
  const signals = schema.table(
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

  /**
   * One row per flow-control key (`step/<activity>/<key>`, `run/<workflow>/<key>` for concurrency,
   * `rate/<activity>/<key>` for rate limits), inserted with the first step or run that names it. A claim that
   * admits work under a key locks its row and bumps `version` in the same statement, so a claim whose snapshot
   * predates another's admission sees a newer version than its snapshot shows and admits nothing under that key
   * (see claim-steps.ts). `recent`: the claim times (DB clock) of a rate key's starts still inside its window.
   */
  const flowKeys = schema.table('flow_keys', {
    key: text('key').primaryKey(),
    version: bigint('version', { mode: 'bigint' })
      .notNull()
      .default(sql`0`),
    recent: timestamp('recent', { withTimezone: true, mode: 'date' })
      .array()
      .notNull()
      .default(sql`'{}'`),
  });

  /**
   * Durable schedules (`engine.schedules`): a cron expression (croner, in `timezone`) or a fixed interval
   * (`every_ms`), and the run each tick starts. `next_tick_at` is the next tick not yet fired, by the database
   * clock; every write to a row bumps `version`, and the statement that fires ticks moves a row forward only
   * where `version` is still the one its evaluator read (compare-and-set), so of several evaluators one wins.
   */
  const schedules = schema.table(
    'schedules',
    {
      id: text('id').primaryKey(),
      /** The cron expression, or null for an interval schedule. */
      cron: text('cron'),
      /** The interval in ms, or null for a cron schedule. */
      everyMs: bigint('every_ms', { mode: 'number' }),
      /** IANA time zone the cron expression is read in. */
      timezone: text('timezone').notNull(),
      targetKind: text('target_kind').notNull(), // 'workflow' | 'activity'
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
      // The evaluator's read: due schedules in due order, off the index.
      index('schedules_due_idx')
        .on(t.nextTickAt)
        .where(sql`NOT ${t.paused}`),
      index('schedules_buffered_idx')
        .on(t.bufferedTickAt)
        .where(sql`${t.bufferedTickAt} IS NOT NULL AND NOT ${t.paused}`),
    ],
  );

  /**
   * The `handle.result()` and `handle.watch()` calls waiting on a run now, one row each, deleted when the call
   * returns (issue 26). A statement that ends a run sends its `run:` NOTIFY item only when the run has a row here,
   * and a turn commit that goes on its `watch:` item only when one has `turns` (see `<schema>.run_watched`). Apart
   * from the runs, so that a reader never writes the hot run row and a watcher that left costs no NOTIFY. A row
   * whose caller died without deleting it lapses at `expires_at`, which a live caller pushes forward, and the
   * retention sweep deletes it.
   */
  const runWatchers = schema.table(
    'run_watchers',
    {
      id: uuid('id').primaryKey(),
      runId: uuid('run_id').notNull(),
      /** A `watch()` (every turn NOTIFYs), not only a `result()` (the end does). */
      turns: boolean('turns').notNull(),
      expiresAt: ts('expires_at').notNull(),
    },
    (t) => [
      index('run_watchers_run_id_idx').on(t.runId, t.turns),
      index('run_watchers_expires_at_idx').on(t.expiresAt),
    ],
  );

  /** Test-only offset of `<schema>.now()` (time travel); one row at most, absent in production. */
  const clockOffset = schema.table('clock_offset', {
    id: boolean('id').primaryKey().default(true),
    offsetMs: bigint('offset_ms', { mode: 'number' }).notNull(),
  });

  return {
    schema,
    fencingTokenSeq,
    runs,
    steps,
    attempts,
    events,
    fences,
    signals,
    flowKeys,
    schedules,
    runWatchers,
    clockOffset,
  };
}

/** The engine's tables, typed; one instance per configured schema name. */
export type Tables = ReturnType<typeof defineTables>;
