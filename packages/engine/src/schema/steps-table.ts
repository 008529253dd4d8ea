import { bigint, index, integer, jsonb, type PgSchema, text, uniqueIndex, uuid } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

import {
  LIVE_STEP_STATUSES,
  STEP_KINDS,
  STEP_STATUSES,
  StepStatus,
  sqlList,
  sqlLiteral,
} from '../turn/state-machine.js';
import { oneOf, ts, uuid7Id } from './columns.js';

/** The live statuses and `running`, for the generated flow-control columns. */
const liveSteps = sql.raw(sqlList(LIVE_STEP_STATUSES));
const running = sql.raw(sqlLiteral(StepStatus.running));

/**
 * One durable call of a run: an activity call, timer, signal wait or child run, at position `seq`. No foreign
 * key to its run (migration 0011): a step is inserted only by the statement that inserts its run or holds its
 * run's row locked, and pruning deletes a run's steps itself.
 *
 * Nothing the hot path writes (status, due time, lease) is a key or predicate of its indexes, so claims,
 * heartbeats and completions are HOT updates (`fillfactor` 50 leaves their versions room on the page: migration
 * 0027; 30 from 0024, while the rows carried their options). An
 * activity's claimability lives in `ready` (ready-table.ts), kept by the `steps_ready_*` triggers of
 * migration 0024; the table's fillfactor is set in migrations 0024 and 0027 (drizzle does not express it).
 */
export function stepsTable(schema: PgSchema) {
  return schema.table(
    'steps',
    {
      id: uuid7Id(schema),
      runId: uuid('run_id').notNull(),
      seq: integer('seq').notNull(),
      kind: text('kind').notNull(), // StepKind: 'activity' | 'timer' | 'signal' | 'child' | 'value'
      name: text('name').notNull(),
      status: text('status').notNull(), // StepStatus: 'scheduled' | 'running' | 'completed' | 'failed' | 'cancelled'
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
      /**
       * `concurrency_key` while the step is `running`, else null: what `steps_running_concurrency_key_idx` indexes
       * (migration 0024). Generated, so no statement keeps it; an unkeyed step's stays null.
       */
      runningConcurrencyKey: text('running_concurrency_key').generatedAlwaysAs(
        sql`CASE WHEN status = ${running} THEN concurrency_key END`,
      ),
      /** `name` while the step is live and has a concurrency or rate key, else null (`steps_live_flow_name_idx`). */
      liveFlowName: text('live_flow_name').generatedAlwaysAs(
        sql`CASE WHEN status IN ${liveSteps} AND (concurrency_key IS NOT NULL OR rate_key IS NOT NULL) THEN name END`,
      ),
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
      /**
       * The current grant, as its attempt shows (migration 0029): when a claim (or a turn's eager grant) made it, the
       * lease it granted before any heartbeat, and the token of the expired attempt it took over. `claimed_at` is
       * null when the step's token was not a claim's (never claimed; bumped by the expiry sweep). The grant's
       * attempts row is written only when it ends other than by its own completion; until then the `attempts`
       * view reads the attempt off these columns and the ones above.
       */
      claimedAt: ts('claimed_at'),
      grantedUntil: ts('granted_until'),
      reclaimedFromToken: bigint('reclaimed_from_token', { mode: 'bigint' }),
      /**
       * The step's options — retry policy, lease, start-to-close timeout — as a row of `policies` (migration 0027),
       * keyed by their content: a step's row carries a 16-byte key instead of a copy of them. No foreign key (a
       * policy row is never deleted).
       */
      policyId: uuid('policy_id').notNull(),
      /**
       * Its policy's `maximumAttempts`, null when it has none: copied onto the row because `ready_expiring` (the
       * ready triggers, the claim's stale-row test) and the claim's and expiry's eligibility read it as a function
       * of the row alone, without a join.
       */
      maxAttempts: integer('max_attempts'),
      /** Backoff before the step may be reclaimed after this attempt's lease expires; set at claim. */
      reclaimDelayMs: integer('reclaim_delay_ms').notNull().default(0),
      /**
       * When the row next becomes claimable: due time when scheduled, lease expiry + reclaim delay when running. An
       * activity's `ready` row is due at this time (at the lease's end when it is to be expired: `<schema>.ready_due`).
       */
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
      oneOf('steps_status_check', t.status, STEP_STATUSES),
      oneOf('steps_kind_check', t.kind, STEP_KINDS),
      // One live step per position; retired steps keep their rows (and attempts, events) beside the new ones.
      uniqueIndex('steps_run_id_seq_live_unique')
        .on(t.runId, t.seq)
        .where(sql`${t.retiredAt} IS NULL`),
      index('steps_run_id_idx').on(t.runId),
      // The running steps of one concurrency key, counted by every claim that would add one. Over a generated
      // column, not `status` in the predicate: an unkeyed step's stays null, so its claim and completion are HOT.
      index('steps_running_concurrency_key_idx')
        .on(t.name, t.runningConcurrencyKey)
        .where(sql`${t.runningConcurrencyKey} IS NOT NULL`),
      // The live steps under a flow-control key, read by the retention sweep to find the keys no work holds.
      index('steps_live_flow_name_idx')
        .on(t.liveFlowName)
        .where(sql`${t.liveFlowName} IS NOT NULL`),
    ],
  );
}
