import { sql } from 'drizzle-orm';
import { LeaseLostError } from '@palisade/sdk';
import type { Database } from '../db/database.js';
import type { EndedRun } from '../db/notification-hub.js';
import type { ClaimedStepRow } from './claim-steps.js';
import type { Delivery, NewStep, RejectedSignal, TurnOutcome } from '../turn/contract.js';
import { endedRunItems, notifyOnce } from './notify.js';
import { requestCancel } from './request-cancel.js';
import { withInfraRetry } from '../infra-retry.js';
import { flowKeysInserted, stepRateKey, stepSlotKey } from './flow-control.js';
import { msInterval, type SchemaNames } from './schema-names.js';

export interface TurnRef {
  readonly runId: string;
  readonly workflowName: string;
  readonly token: bigint;
  readonly nonce: string;
  readonly attempt: number;
  /** `runs.wake_count` when the turn was claimed. */
  readonly wakeCount: number;
  /** Whether the run had a cancel request when the turn was claimed. */
  readonly cancelRequested: boolean;
  /** The turn's lease (ms), as claimed. */
  readonly leaseMs: number;
  /**
   * The claim's database time (epoch ms, `TurnParams.nowMs`): the outcomes the turn gives steps (timers fired,
   * signals taken, steps recorded cancelled) are recorded as finished at its whole ms.
   */
  readonly nowMs: number;
}

/** Stored error of a step a turn recorded cancelled (see {@link commitTurn}, 2). */
const CANCELLED_UNSEEN = {
  type: 'CancelledFailure',
  message: 'cancelled: the run was cancelled before this step could start',
  nonRetryable: true,
};

/**
 * What lets a turn's commit grant the activities it schedules to the committing worker (eager dispatch): the
 * worker's id, the activities and queues it serves, and how many attempts it can start now (0: none).
 */
export interface EagerDispatch {
  readonly workerId: string;
  readonly activityNames: readonly string[];
  readonly queues: readonly string[];
  readonly limit: number;
}

const NO_EAGER_DISPATCH: EagerDispatch = { workerId: '', activityNames: [], queues: [], limit: 0 };

/**
 * What a committed turn hands back: the activity steps it granted to the committing worker, to start now, and,
 * when it ended the run, the run's end as stored.
 */
export interface CommittedTurn {
  readonly eagerSteps: readonly ClaimedStepRow[];
  readonly ended?: EndedRun;
}

/**
 * A turn this worker runs without a claim, on the workflow instance it kept from the run's previous turn, right after
 * one of the run's activities completed on it, and commits in the same statement as that completion (a fused
 * step: {@link commitFusedTurn}).
 */
export interface FusedTurnRef {
  readonly runId: string;
  readonly workflowName: string;
  readonly workerId: string;
  /** `runs.turn_epoch`, `turn_attempt` and `wake_count` as the kept instance's last turn left them. */
  readonly turnEpoch: number;
  readonly turnAttempt: number;
  readonly wakeCount: number;
  /**
   * The turn's time (epoch ms) as `ctx.now()` records it: a lower bound of the database clock (the previous turn's
   * database time plus the local monotonic time since); the commit is refused if it is ahead of the database clock.
   */
  readonly nowMs: number;
  /** The completion the turn follows: the attempt (step, token, nonce) and its output. */
  readonly completion: {
    readonly stepId: string;
    readonly token: bigint;
    readonly nonce: string;
    readonly output: unknown;
  };
}

/** What a fused step's statement answers: whether it applied, and what a turn commit hands back when it did. */
export interface CommittedFusedTurn extends CommittedTurn {
  readonly applied: boolean;
  /** The turn's grant as stored (when applied): its epoch, attempt and token. */
  readonly turn?: { readonly epoch: number; readonly attempt: number; readonly token: string };
}

/** The commit raced with a change the turn read (a cancel of the run or a step): the turn must run again. */
export class TurnConflict extends Error {}

/**
 * Commit a workflow turn, fenced (DESIGN.md §4, last paragraph), in one statement (one round trip, its own
 * transaction):
 * 1. the fence: the run row is locked and the turn goes on only while it holds its token, nonce and an
 *    unexpired lease, judged by the clock read once the row is locked (the lock is held to COMMIT, so no other
 *    turn of the run can commit in between). Then, by id, every step this commit changes is locked — the
 *    outcomes it marks delivered and, when the run ends, every live step — invariant 14's one order. A locking
 *    read returns a row's newest version even when the statement's snapshot is older (it waited for the run
 *    row), so what the commit decides from those rows is current; no other writer adds steps to a run whose
 *    turn this commit holds. Fence refused → nothing is written, the rejection is recorded in its own
 *    statement, and {@link LeaseLostError} is thrown;
 * 2. new steps are inserted — activities due now, timers due `now + delay` by the DB clock (the due time is
 *    fixed when the sleep starts), recorded values completed, steps the turn recorded cancelled (a cancel
 *    request the code had not seen yet) `cancelled` with their delivery order, and, when the turn ends the run,
 *    its other new steps cancelled with it. A cancel requested after the claim would have ended the steps this
 *    turn schedules had they existed, and a timer the turn saw fire may have been cancelled since: in either case
 *    nothing is written and the turn runs again ({@link TurnConflict}) so that it sees the change;
 * 3. outcomes delivered for the first time get their delivery order; timers the turn saw fire are completed;
 * 4. the run either ends (output or error, terminal event, every live step cancelled — running ones too, whose
 *    holders are refused as `cancelled` at their next write — a NOTIFY when a `handle.result()` registered on
 *    it) or is given its next turn time: now if
 *    anything woke it since the claim (`wake_count` moved), else its earliest timer, new ones included;
 * 5. the turn's attempt row ends; workers of the new steps' queues are NOTIFYed; with `dispatch`, new activities
 *    this worker serves are granted to it (eager dispatch) and returned, to start now.
 * The run row is written once (a statement may not update one row twice), and every write waits for the gate
 * (fence passed, no conflict).
 * @returns the activity steps granted eagerly, and, when the turn ended the run, the run's end as stored.
 * @throws LeaseLostError when the fence refused the commit (recorded as `attempt:stale-rejected`);
 * TurnConflict when a cancel or a timer changed under the turn (handed back, due now); the driver's error,
 * wrapped, when the database refused the statement (nothing was written).
 */
export async function commitTurn(
  db: Database,
  n: SchemaNames,
  ref: TurnRef,
  result: TurnRecord,
  dispatch: EagerDispatch = NO_EAGER_DISPATCH,
): Promise<CommittedTurn> {
  const row = await turnStatement(db, n, { kind: 'claimed', ref }, result, dispatch);
  if (row?.conflict) {
    await releaseTurn(db, n, ref);
    throw new TurnConflict(`turn of run ${ref.runId} raced with a cancel; it runs again`);
  }
  if (!row?.fenced) await rejectTurn(db, n, ref);
  await cascadeToChildren(db, n, row);
  return { eagerSteps: row?.eager_steps ?? [], ...(row?.ended ? { ended: row.ended } : {}) };
}

/**
 * A fused step (DESIGN.md §4, last paragraph): record an activity's completion and commit the turn it wakes, which
 * the completing worker ran beforehand on the workflow instance it kept, in one statement — one round trip per
 * step of a sequential workflow. The statement is {@link commitTurn}'s, with two differences:
 * - the turn is granted in the statement itself, as a claim grants one: a fresh token from the global sequence, a
 *   fresh nonce, turn epoch and attempt + 1, an attempts row (ended `completed` at once, as the commit ends it);
 * - its fence: the completion's own (token, nonce, step running, lease unexpired, judged once the step is locked),
 *   and, on the run row, proof that the kept instance saw the whole history but this completion: no turn was
 *   granted since its last turn (epoch, attempt and the granting worker unchanged, no turn lease), nothing woke
 *   the run since (`wake_count` unchanged: every writer of a run's history but a timer's coming due moves it), no
 *   turn due (no timer came due), no cancel request, and `nowMs` not ahead of the database clock.
 * The completed step is written once: its completion and its delivery order in one UPDATE.
 * When any of that fails, nothing is written and `applied` is false: the caller records the completion the
 * ordinary way ({@link completeSteps}), which also records a stale completion's rejection, and drops the instance
 * it ran the turn on (the next turn replays in full). Throws the driver's error (wrapped) when the database refused
 * the statement: nothing was written.
 */
export async function commitFusedTurn(
  db: Database,
  n: SchemaNames,
  fused: FusedTurnRef,
  result: TurnRecord,
  dispatch: EagerDispatch = NO_EAGER_DISPATCH,
): Promise<CommittedFusedTurn> {
  const row = await turnStatement(db, n, { kind: 'fused', fused }, result, dispatch);
  if (!row?.fenced) return { applied: false, eagerSteps: [] };
  await cascadeToChildren(db, n, row);
  return {
    applied: true,
    eagerSteps: row.eager_steps ?? [],
    ...(row.ended ? { ended: row.ended } : {}),
    ...(row.turn ? { turn: row.turn } : {}),
  };
}

/** What a turn's code decided: the steps it adds, the outcomes it delivered, and how it ended. */
export interface TurnRecord {
  readonly newSteps: readonly NewStep[];
  readonly deliveries: readonly Delivery[];
  readonly outcome: TurnOutcome;
  /** The run's progress as the turn last set it (`ctx.setProgress`), if it set one. */
  readonly progress?: { readonly value: unknown };
  /** Pending signals a wait of the turn refused (payload not fitting its schema): recorded undelivered. */
  readonly rejectedSignals?: readonly RejectedSignal[];
}

type TurnGrant = { kind: 'claimed'; ref: TurnRef } | { kind: 'fused'; fused: FusedTurnRef };

interface TurnStatementRow {
  /** Claimed: the turn's fence held. Fused: the statement applied. */
  fenced: boolean;
  conflict: boolean | null;
  eager_steps: ClaimedStepRow[] | null;
  ended: EndedRun | null;
  turn: { epoch: number; attempt: number; token: string } | null;
  /** Child runs, started with cancellation 'cascade', whose steps the run's end cancelled (only when it ended). */
  cascade_children?: string[] | null;
}

/**
 * End the live steps of the children a run's end just marked cancelled (`cancellation: 'cascade'`; the commit
 * marked them and woke them), each child in a transaction of its own after the commit, as a cancel does, which
 * cascades on to theirs. A process that dies in between leaves a child marked: it sees the cancel at its next
 * step instead of at once. A child that ended meanwhile is left as it is.
 */
async function cascadeToChildren(
  db: Database,
  n: SchemaNames,
  row: TurnStatementRow | undefined,
): Promise<void> {
  for (const childRunId of row?.cascade_children ?? []) {
    await withInfraRetry(() =>
      requestCancel(db, n, { runId: childRunId, reason: 'its parent run ended with it running' }),
    );
  }
}

/** The one statement of {@link commitTurn} and {@link commitFusedTurn}. */
async function turnStatement(
  db: Database,
  n: SchemaNames,
  grant: TurnGrant,
  result: TurnRecord,
  dispatch: EagerDispatch,
): Promise<TurnStatementRow | undefined> {
  const fused = grant.kind === 'fused' ? grant.fused : undefined;
  const runId = grant.kind === 'claimed' ? grant.ref.runId : grant.fused.runId;
  const wakeCount = grant.kind === 'claimed' ? grant.ref.wakeCount : grant.fused.wakeCount;
  const cancelRequested = grant.kind === 'claimed' ? grant.ref.cancelRequested : false;
  // When the outcomes this turn gives steps (a timer it saw fire, a signal it handed a wait, a step it recorded
  // cancelled, a fused step's completion) are recorded as finished: the turn's own whole ms, which is what the
  // workflow's clock read after them in this turn (workflowClockAfter), so that a replay, reading it back as
  // `finished_ms`, gives the code the same `Date.now()`. Not the commit's clock: the turn ran before it.
  const outcomesAt = sql`('epoch'::timestamptz + ${msInterval(
    sql`${Math.floor(grant.kind === 'claimed' ? grant.ref.nowMs : grant.fused.nowMs)}::bigint`,
  )})`;
  const outcome = result.outcome;
  const ending = outcome.kind !== 'blocked';
  const status = ending ? outcome.kind : null;
  const output = outcome.kind === 'completed' ? JSON.stringify(outcome.output ?? null) : null;
  const error =
    outcome.kind === 'failed' || outcome.kind === 'cancelled' ? JSON.stringify(outcome.error) : null;
  const progress = result.progress ? JSON.stringify(result.progress.value ?? null) : null;
  // A cancel requested after the claim conflicts with a turn that goes on waiting on new timers or activities.
  const cancelSensitive = !cancelRequested && !ending && result.newSteps.some((s) => s.kind !== 'value');
  const steps = result.newSteps.map((s) => ({
    seq: s.seq,
    kind: s.kind,
    name: s.name,
    after_delivered_seq: s.afterDeliveredSeq,
    // A child step runs from its start: no worker claims it; the child run's end completes it.
    status:
      s.kind === 'value' || (s.kind === 'signal' && s.signalId !== undefined)
        ? 'completed'
        : s.cancelled
          ? 'cancelled'
          : s.kind === 'child'
            ? 'running'
            : 'scheduled',
    delivered_seq: s.kind === 'value' ? null : (s.deliveredSeq ?? null),
    error: s.kind !== 'value' && s.cancelled ? CANCELLED_UNSEEN : null,
    // A signal wait keeps its timeout, so that a retry that schedules it again can give it its full length.
    // A child step records its child run's id, input, key and cancellation policy.
    input:
      s.kind === 'activity'
        ? s.input
        : s.kind === 'signal' && s.timeoutMs !== undefined
          ? { timeoutMs: s.timeoutMs }
          : s.kind === 'child'
            ? { runId: s.childRunId, input: s.input, key: s.key, cancellation: s.cancellation }
            : null,
    output: s.kind === 'value' ? s.output : null,
    queue: s.kind === 'activity' || s.kind === 'child' ? s.queue : null,
    priority: s.kind === 'activity' || s.kind === 'child' ? s.priority : 0,
    retry_policy: s.kind === 'activity' ? s.retryPolicy : {},
    lease_ms: s.kind === 'activity' ? s.leaseMs : 0,
    start_to_close_timeout_ms: s.kind === 'activity' ? s.startToCloseTimeoutMs : 0,
    delay_ms:
      s.kind === 'timer'
        ? (s.delayMs ?? null)
        : s.kind === 'activity'
          ? 0
          : s.kind === 'signal'
            ? (s.timeoutMs ?? null)
            : null,
    due_at_ms: s.kind === 'timer' ? (s.dueAtMs ?? null) : null,
    signal_id: s.kind === 'signal' ? (s.signalId ?? null) : null,
    concurrency_key: (s.kind === 'activity' && s.concurrency?.key) || null,
    concurrency_limit: (s.kind === 'activity' && s.concurrency?.limit) || null,
    rate_key: s.kind === 'activity' && s.rateLimit ? s.rateLimit.key : null,
    rate_limit: (s.kind === 'activity' && s.rateLimit?.limit) || null,
    rate_period_ms: (s.kind === 'activity' && s.rateLimit?.periodMs) || null,
  }));
  // Flow-control keys the turn's new steps name: only then does the commit insert them (flow-control.ts).
  const flowKeyed = steps.some((s) => s.concurrency_key !== null || s.rate_key !== null);
  const deliveries: {
    id: string | null;
    seq: number | null;
    delivered_seq: number | null;
    fires_timer: boolean;
    signal_id: string | null;
  }[] = result.deliveries.map((d) => ({
    id: d.stepId,
    seq: d.seq,
    delivered_seq: d.deliveredSeq,
    fires_timer: d.firesTimer,
    signal_id: d.signalId ?? null,
  }));
  // A fused step's completed step is locked and written with the deliveries (undelivered if the code did not take it).
  if (fused && !deliveries.some((d) => d.id === fused.completion.stepId)) {
    deliveries.push({
      id: fused.completion.stepId,
      seq: null,
      delivered_seq: null,
      fires_timer: false,
      signal_id: null,
    });
  }
  // The pending signals this turn hands to waits (recorded ones and new ones): each must still be pending.
  const takenSignals = [
    ...deliveries.flatMap((d) => (d.signal_id === null ? [] : [d.signal_id])),
    ...steps.flatMap((st) => (st.signal_id === null ? [] : [st.signal_id])),
  ];
  const takenSignalsArray = `{${takenSignals.join(',')}}`;
  // The pending signals a wait of this turn refused; with the taken ones, the signals a run's end leaves alone.
  const rejected = result.rejectedSignals ?? [];
  const rejecting = rejected.length > 0;
  const settledSignalsArray = `{${[...takenSignals, ...rejected.map((r) => r.signalId)].join(',')}}`;
  // Child runs this turn starts (in this statement), and whether any names a key (checked against existing runs).
  const startsChildren = steps.some((st) => st.kind === 'child' && st.status === 'running');
  const childKeys = startsChildren && result.newSteps.some((st) => st.kind === 'child' && st.key !== null);
  // What only a turn that hands out signals, or completes a wait by position, needs: left out of the statement
  // otherwise (its own prepared text), so a turn of a run without signals pays for none of it.
  const signalsTaken = takenSignals.length > 0;
  const byPosition = deliveries.some((d) => d.id === null);
  const fusedStepId = fused?.completion.stepId ?? null;
  // The fence on the run row: the claim's (token, nonce, unexpired lease), or a fused step's (see commitFusedTurn).
  const runFence =
    grant.kind === 'claimed'
      ? sql`lk.turn_token = ${grant.ref.token.toString()}::bigint AND lk.turn_nonce = ${grant.ref.nonce}::uuid
         AND lk.turn_lease_expires_at > (SELECT t FROM lock_clock)`
      : sql`lk.turn_lease_expires_at IS NULL AND lk.turn_epoch = ${grant.fused.turnEpoch}::int
         AND lk.turn_attempt = ${grant.fused.turnAttempt}::int AND lk.turn_worker_id = ${grant.fused.workerId}
         AND lk.wake_count = ${grant.fused.wakeCount}::int AND NOT lk.cancel_requested
         AND (lk.turn_next_run_at IS NULL OR lk.turn_next_run_at > (SELECT t FROM lock_clock))
         AND ${grant.fused.nowMs}::float8 <= extract(epoch FROM (SELECT t FROM lock_clock)) * 1000`;
  // A fused step's own fence: the completing attempt still holds its step, judged once the step is locked.
  const stepFence = fused
    ? sql`EXISTS (SELECT 1 FROM locked l WHERE l.id = ${fused.completion.stepId}::uuid
                    AND l.fencing_token = ${fused.completion.token.toString()}::bigint
                    AND l.nonce = ${fused.completion.nonce}::uuid AND l.status = 'running'
                    AND l.lease_expires_at > (SELECT t FROM step_clock))`
    : sql`true`;
  const rows = await db.rows<TurnStatementRow>(sql`
    WITH ${
      ending
        ? sql`-- A run that ends completes its parent's child step and wakes the parent: the parent's run row is locked
    -- first, before this run's (an ancestor before its descendants, as a cancel that cascades locks them).
    parent_lk AS MATERIALIZED (
      SELECT p.id FROM ${n.runs} p
       WHERE p.id = (SELECT c.parent_run_id FROM ${n.runs} c WHERE c.id = ${runId}::uuid)
         FOR NO KEY UPDATE OF p),`
        : sql``
    }
    lk AS MATERIALIZED (
      SELECT r.id, r.queue, r.status, r.turn_token, r.turn_nonce, r.turn_lease_expires_at, r.turn_epoch,
             r.turn_attempt, r.turn_worker_id, r.wake_count, r.turn_next_run_at,
             r.cancel_requested_at IS NOT NULL AS cancel_requested
        FROM ${n.runs} r
       WHERE r.id = ${runId}::uuid${ending ? sql` AND (SELECT count(*) FROM parent_lk) >= 0` : sql``}
         FOR NO KEY UPDATE OF r),
    -- The turn's lease is judged by the clock read once the run row is locked: read before a wait on a row
    -- another statement only locked (no recheck follows), it would pass a lease that ran out meanwhile.
    lock_clock AS MATERIALIZED (SELECT ${n.now} AS t FROM (SELECT count(*) FROM lk) x),
    fence AS MATERIALIZED (
      SELECT lk.* FROM lk
       WHERE ${runFence} AND lk.status IN ('pending', 'running')),
    -- The outcomes delivered, each by step id; a wait recorded by a turn of a kept instance (which does not know
    -- its id) by its position, as the live step there.
    dl AS MATERIALIZED (
      SELECT ${
        byPosition
          ? sql`coalesce(x.id, (SELECT s.id FROM ${n.steps} s
                              WHERE s.run_id = ${runId}::uuid AND s.seq = x.seq AND s.retired_at IS NULL))`
          : sql`x.id`
      } AS id, x.delivered_seq, x.fires_timer, x.signal_id
        FROM jsonb_to_recordset(${JSON.stringify(deliveries)}::jsonb)
             AS x(id uuid, seq int, delivered_seq int, fires_timer boolean, signal_id bigint)),
    -- Then the steps this commit changes, by id, each as its newest version (a claim that committed while the
    -- statement waited is seen as running; one that comes later skips the locked row).
    locked AS MATERIALIZED (
      SELECT s.id, s.status, s.fencing_token, s.nonce, s.lease_expires_at FROM ${n.steps} s
       WHERE s.run_id = ${runId}::uuid AND EXISTS (SELECT 1 FROM fence)
         AND (${
           byPosition
             ? sql`s.id IN (SELECT id FROM dl)`
             : sql`s.id = ANY(${`{${deliveries.map((d) => d.id).join(',')}}`}::uuid[])`
         }
              OR (${ending} AND s.status IN ('scheduled', 'running') AND s.retired_at IS NULL))
       ORDER BY s.id FOR NO KEY UPDATE OF s),
    -- The signals the turn hands to waits, locked after the steps (newest versions): still pending, or the commit
    -- conflicts (a retry, or a turn whose snapshot was older than a commit that took them, ran again).
${
  signalsTaken
    ? sql`
    taken AS MATERIALIZED (
      SELECT g.id, g.consumed_at, g.payload FROM ${n.signals} g
       WHERE g.id = ANY(${takenSignalsArray}::bigint[]) AND g.run_id = ${runId}::uuid
         AND EXISTS (SELECT 1 FROM fence) AND (SELECT count(*) FROM locked) >= 0
       ORDER BY g.id FOR UPDATE OF g),`
    : sql``
}
    -- The clock read once the commit's locks are held: a fused step's completion is judged and written at it; every
    -- other write of the commit reads clock, which is the same but for a fused step, whose turn comes after its
    -- completion (a microsecond later at least, so that a run's events order the completion first).
    step_clock AS MATERIALIZED (SELECT ${n.now} AS t FROM (SELECT count(*) FROM locked) x),
    clock AS MATERIALIZED (
      SELECT ${fused ? sql`greatest(${n.now}, t + interval '1 microsecond')` : sql`t`} AS t FROM step_clock),
    gate AS MATERIALIZED (
      SELECT f.id, f.queue,
             (f.cancel_requested AND ${cancelSensitive})
             OR EXISTS (SELECT 1 FROM dl LEFT JOIN locked l ON l.id = dl.id
                         WHERE (dl.fires_timer OR dl.signal_id IS NOT NULL) AND l.status IS DISTINCT FROM 'scheduled')
             ${
               signalsTaken
                 ? sql`OR (SELECT count(*) FROM taken WHERE consumed_at IS NULL) <> ${takenSignals.length}::int`
                 : sql``
             }${
               ending
                 ? sql`
             -- A run's end marks every signal still pending undelivered, as this statement's snapshot has them: a
             -- signal whose sender held the run row while the statement started is not in it (its wake_count is in
             -- the locked row, not in the snapshot's). The turn runs again, and its commit sees the signal.
             OR f.wake_count <> (SELECT r.wake_count FROM ${n.runs} r WHERE r.id = ${runId}::uuid)`
                 : sql``
             } AS conflict
        FROM fence f),
    -- Every write of the commit waits for go, and go for every lock of locked (step_clock counts them): no write
    -- may lock a step before the steps locked here are all held, in id order (seen: deadlocks with heartbeats when
    -- the deliveries were marked before the run's other live steps were locked).
    go AS MATERIALIZED (
      SELECT id, queue FROM gate WHERE NOT conflict AND (SELECT t FROM step_clock) IS NOT NULL AND ${stepFence}),${
        fused
          ? sql`
    -- A fused step's turn grant, taken before the steps its commit grants (planned waits for it): the turn's
    -- token is smaller than theirs, as when a claim granted the turn before its commit.
    turn_grant AS MATERIALIZED (SELECT ${n.nextToken} AS token, gen_random_uuid() AS nonce FROM go),`
          : sql``
      }
    ns AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(steps)}::jsonb) AS x(
        seq int, kind text, name text, after_delivered_seq int, status text, delivered_seq int, error jsonb, input jsonb, output jsonb,
        queue text, priority int, retry_policy jsonb, lease_ms int, start_to_close_timeout_ms int,
        delay_ms float8, due_at_ms float8, signal_id bigint, concurrency_key text, concurrency_limit int,
        rate_key text, rate_limit int, rate_period_ms int)),
    -- A position a retry retired and the code now schedules again is the same unit of work (invariant 13):
    -- the new row takes the retired rows' fencing scope and highest epoch, and is not due before the lease of
    -- an attempt that may still hold one of them (ended by the retirement, not by itself) runs out.
    prev AS (
      SELECT p.seq, (array_agg(p.fencing_scope ORDER BY p.created_at))[1] AS fencing_scope, max(p.epoch) AS epoch,
             max(p.lease_expires_at) FILTER (WHERE p.ended_nonce IS DISTINCT FROM p.nonce) AS held_until
        FROM ${n.steps} p
       WHERE p.run_id = ${runId}::uuid AND p.retired_at IS NOT NULL AND p.seq IN (SELECT seq FROM ns)
       GROUP BY p.seq),
    -- Eager dispatch: the new activities this worker serves, as many as it has slots for, are granted to it
    -- here, as a claim grants (claimSteps): attempt 1, epoch + 1, a fresh token from the global sequence, a
    -- fresh nonce, a lease from the database clock capped by the attempt deadline, an attempts row. Not a
    -- position whose retired predecessor may still be held (it is not due before that lease ends), and nothing
    -- when the turn ends the run.
    eager_sel AS MATERIALIZED (
      SELECT ns.seq FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE NOT ${ending} AND ns.kind = 'activity' AND ns.status = 'scheduled'
         AND ns.name IN (SELECT jsonb_array_elements_text(${JSON.stringify(dispatch.activityNames)}::jsonb))
         AND ns.queue IN (SELECT jsonb_array_elements_text(${JSON.stringify(dispatch.queues)}::jsonb))
         AND (prev.held_until IS NULL OR prev.held_until <= (SELECT t FROM clock))
         -- Not a step under a concurrency key or a rate limit: only a claim admits those (flow-control.ts).
         AND ns.concurrency_key IS NULL AND ns.rate_key IS NULL
       ORDER BY ns.seq
       LIMIT ${dispatch.limit}),
    ${
      childKeys
        ? sql`-- A child whose key names an existing run of its workflow. The run this very parent started at this very
    -- position (its step there retired by a retry of the parent, and the code, replayed, starts the child again) is
    -- its own earlier child, as a Temporal reset re-runs it: one that failed or was cancelled gives its key to a
    -- new child run (Temporal's default workflow-id reuse: a closed run's id may start anew), kept itself as a run
    -- of the parent's history; one still pending or running becomes the child of the new step (its end completes
    -- it); one that completed completes the new step with its output at once. Any other run keeps its key and the
    -- child is not started: its step fails (the code sees a ChildWorkflowFailure naming that run at its next turn).
    key_holders AS MATERIALIZED (
      SELECT x.seq, r.id AS run_id,
             r.parent_run_id = ${runId}::uuid
               AND EXISTS (SELECT 1 FROM ${n.steps} o
                            WHERE o.id = r.parent_step_id AND o.run_id = ${runId}::uuid AND o.seq = x.seq
                              AND o.retired_at IS NOT NULL) AS own
        FROM ns x
        JOIN ${n.runs} r ON r.kind = 'workflow' AND r.name = x.name AND r.idempotency_key = x.input->>'key'
       WHERE x.kind = 'child' AND x.status = 'running'),
    -- Its own children locked (after the parent's rows: an ancestor before its descendants), each as its newest
    -- version: one that ended while this statement waited for the parent's lock is seen ended.
    own_locked AS MATERIALIZED (
      SELECT r.id, r.status, r.output FROM ${n.runs} r
       WHERE r.id IN (SELECT run_id FROM key_holders WHERE own)
       ORDER BY r.id FOR NO KEY UPDATE OF r),
    child_keys AS MATERIALIZED (
      SELECT h.seq, h.run_id, h.own, l.status, l.output
        FROM key_holders h LEFT JOIN own_locked l ON l.id = h.run_id
       -- An own child pruned meanwhile holds no key any more.
       WHERE NOT h.own OR l.id IS NOT NULL),`
        : sql``
    }
    planned AS (
      SELECT ns.*, prev.fencing_scope AS prev_scope, prev.epoch AS prev_epoch, prev.held_until,
             ns.seq IN (SELECT seq FROM eager_sel) AS eager,
             ${childKeys ? sql`(SELECT k.run_id::text FROM child_keys k WHERE k.seq = ns.seq AND NOT k.own)` : sql`NULL::text`} AS key_taken_by,
             ${
               childKeys
                 ? sql`(SELECT k.run_id FROM child_keys k
                        WHERE k.seq = ns.seq AND k.own AND k.status NOT IN ('failed', 'cancelled'))`
                 : sql`NULL::uuid`
             } AS reused_run_id,
             ${
               childKeys
                 ? sql`(SELECT k.output FROM child_keys k WHERE k.seq = ns.seq AND k.own AND k.status = 'completed')`
                 : sql`NULL::jsonb`
             } AS reused_output,
             ${
               childKeys
                 ? sql`EXISTS (SELECT 1 FROM child_keys k WHERE k.seq = ns.seq AND k.own AND k.status = 'completed')`
                 : sql`false`
             } AS reused_completed,
             -- A step the run's end cancels with the run's other live steps (a child it would start: not started).
             ${ending} AND (ns.status = 'scheduled' OR (ns.kind = 'child' AND ns.status = 'running')) AS ends_with_run,
             CASE WHEN 1 >= (ns.retry_policy->>'maximumAttempts')::int THEN 0
                  ELSE ${n.retryDelayMs}(ns.retry_policy, 1) END AS first_reclaim_delay_ms
        FROM ns LEFT JOIN prev ON prev.seq = ns.seq
       WHERE EXISTS (SELECT 1 FROM go)${fused ? sql` AND EXISTS (SELECT 1 FROM turn_grant)` : sql``}),
    inserted AS (
      INSERT INTO ${n.steps} (run_id, seq, kind, name, fencing_scope, epoch, after_delivered_seq, status,
                              delivered_seq, error, input, output, queue, priority, retry_policy, lease_ms,
                              start_to_close_timeout_ms, next_run_at, finished_at, cancel_requested_at, created_at,
                              attempt, fencing_token, nonce, worker_id, attempt_deadline_at, lease_expires_at,
                              reclaim_delay_ms, started_at, concurrency_key, concurrency_limit, rate_key, rate_limit,
                              rate_period_ms)
      SELECT ${runId}::uuid, p.seq, p.kind, p.name,
             coalesce(p.prev_scope, ${'run:' + runId + '/seq:'} || p.seq::text),
             coalesce(p.prev_epoch, 0) + CASE WHEN p.eager THEN 1 ELSE 0 END,
             p.after_delivered_seq,
             CASE WHEN p.eager THEN 'running' WHEN p.ends_with_run THEN 'cancelled'
                  WHEN p.key_taken_by IS NOT NULL THEN 'failed' WHEN p.reused_completed THEN 'completed'
                  ELSE p.status END,
             p.delivered_seq,
             CASE WHEN p.key_taken_by IS NOT NULL
                  THEN jsonb_build_object(
                         'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', p.key_taken_by,
                         'message', 'child workflow ' || p.name || ' was not started: run ' || p.key_taken_by
                                    || ' of that workflow has its key ' || (p.input->>'key'),
                         'cause', jsonb_build_object(
                           'type', 'RunKeyConflict', 'nonRetryable', true,
                           'message', 'run ' || p.key_taken_by || ' has key ' || (p.input->>'key')))
                  ELSE p.error END,
             -- A child step records the run it waits for: its own earlier child when it takes that one again.
             CASE WHEN p.reused_run_id IS NOT NULL AND NOT p.ends_with_run
                  THEN jsonb_set(p.input, '{runId}', to_jsonb(p.reused_run_id::text)) ELSE p.input END,
             ${
               signalsTaken
                 ? sql`CASE WHEN p.signal_id IS NOT NULL
                  THEN (SELECT jsonb_build_object('signalId', g.id::text, 'payload', g.payload) FROM taken g
                         WHERE g.id = p.signal_id)
                  WHEN p.reused_completed AND NOT p.ends_with_run THEN p.reused_output
                  ELSE p.output END`
                 : sql`CASE WHEN p.reused_completed AND NOT p.ends_with_run THEN p.reused_output ELSE p.output END`
             },
             coalesce(p.queue, (SELECT queue FROM go)), p.priority,
             p.retry_policy, p.lease_ms, p.start_to_close_timeout_ms,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ${msInterval(sql`least(p.lease_ms, p.start_to_close_timeout_ms) + p.first_reclaim_delay_ms`)}
                  WHEN p.status <> 'scheduled' OR p.ends_with_run THEN NULL
                  ELSE greatest(CASE WHEN p.due_at_ms IS NOT NULL THEN to_timestamp(p.due_at_ms / 1000.0)
                                     WHEN p.delay_ms IS NOT NULL THEN (SELECT t FROM clock) + ${msInterval(sql`p.delay_ms`)} END,
                                p.held_until) END,
             CASE WHEN p.delivered_seq IS NOT NULL AND NOT p.ends_with_run AND p.key_taken_by IS NULL THEN ${outcomesAt}
                  WHEN p.status NOT IN ('scheduled', 'running') OR p.ends_with_run OR p.key_taken_by IS NOT NULL
                       OR p.reused_completed
                  THEN (SELECT t FROM clock) END,
             CASE WHEN p.ends_with_run THEN (SELECT t FROM clock) END,
             (SELECT t FROM clock),
             CASE WHEN p.eager THEN 1 ELSE 0 END,
             CASE WHEN p.eager THEN ${n.nextToken} END,
             CASE WHEN p.eager THEN gen_random_uuid() END,
             CASE WHEN p.eager THEN ${dispatch.workerId} END,
             CASE WHEN p.eager THEN (SELECT t FROM clock) + ${msInterval(sql`p.start_to_close_timeout_ms`)} END,
             CASE WHEN p.eager THEN (SELECT t FROM clock)
                                    + ${msInterval(sql`least(p.lease_ms, p.start_to_close_timeout_ms)`)} END,
             CASE WHEN p.eager THEN p.first_reclaim_delay_ms ELSE 0 END,
             CASE WHEN p.eager THEN (SELECT t FROM clock) END,
             p.concurrency_key, p.concurrency_limit, p.rate_key, p.rate_limit, p.rate_period_ms
        FROM planned p
      RETURNING id, seq, kind, name, status, queue, priority, error, next_run_at, input, attempt, epoch, fencing_token, nonce,
                lease_ms, start_to_close_timeout_ms, retry_policy, lease_expires_at, fencing_scope, started_at,
                -- Cancelled with the run (a step the code saw cancelled carries its stored error).
                status = 'cancelled' AND error IS NULL AS ended_with_run),
    eager_attempts AS (
      INSERT INTO ${n.attempts} (run_id, step_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at,
                                 granted_until)
      SELECT ${runId}::uuid, id, 'activity', attempt, epoch, fencing_token, nonce, ${dispatch.workerId}, started_at,
             lease_expires_at
        FROM inserted WHERE kind = 'activity' AND status = 'running'
      RETURNING 1),${
        flowKeyed
          ? flowKeysInserted(
              n,
              sql`SELECT ${stepSlotKey(sql`x`)} FROM ns x WHERE x.concurrency_key IS NOT NULL AND EXISTS (SELECT 1 FROM go)
                  UNION ALL
                  SELECT ${stepRateKey(sql`x`)} FROM ns x WHERE x.rate_key IS NOT NULL AND EXISTS (SELECT 1 FROM go)`,
            )
          : sql``
      }
    scheduled_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, at)
      SELECT ${runId}::uuid, id,
             CASE kind WHEN 'timer' THEN 'timer:started' WHEN 'signal' THEN 'signal:waiting'
                       WHEN 'child' THEN 'child:started' ELSE 'step:scheduled' END,
             CASE WHEN kind = 'child' THEN jsonb_build_object('name', name, 'seq', seq, 'childRunId', input->>'runId')
                  ELSE jsonb_build_object('name', name, 'seq', seq, 'dueAt', next_run_at) END,
             (SELECT t FROM clock)
        FROM inserted WHERE kind IN ('activity', 'timer', 'signal') OR (kind = 'child' AND status = 'running')
      RETURNING 1),${
        startsChildren
          ? sql`
    -- The child runs this turn starts, pending with their first turn due now, their parent recorded; a child whose
    -- key was taken fails its step instead.
${
  childKeys
    ? sql`    -- The parent's own earlier children at the positions it starts again (see child_keys), locked after the
    -- parent's rows (an ancestor before its descendants): one that failed or was cancelled lets go of its key for
    -- the new child run; one still pending or running is now the new step's child. Before the inserts below.
    own_children AS (
      UPDATE ${n.runs} c
         SET idempotency_key = CASE WHEN c.status IN ('failed', 'cancelled') THEN NULL ELSE c.idempotency_key END,
             parent_step_id = CASE WHEN c.status IN ('failed', 'cancelled') THEN c.parent_step_id ELSE i.id END
        FROM child_keys k JOIN inserted i ON i.seq = k.seq AND i.kind = 'child' AND i.status = 'running'
       WHERE c.id = k.run_id AND k.own AND c.status <> 'completed'
      RETURNING c.id, c.status),
`
    : sql``
}    children AS (
      INSERT INTO ${n.runs} (id, kind, name, status, input, idempotency_key, queue, priority, turn_next_run_at,
                             created_at, parent_run_id, parent_step_id)
      SELECT (i.input->>'runId')::uuid, 'workflow', i.name, 'pending', i.input->'input', i.input->>'key', i.queue,
             i.priority, (SELECT t FROM clock), (SELECT t FROM clock), ${runId}::uuid, i.id
        FROM inserted i WHERE i.kind = 'child' AND i.status = 'running'${
          childKeys
            ? sql`
         AND (SELECT count(*) FROM own_children) >= 0
         AND NOT EXISTS (SELECT 1 FROM own_children o
                          WHERE o.id = (i.input->>'runId')::uuid AND o.status NOT IN ('failed', 'cancelled'))`
            : sql``
        }
      RETURNING id, name, queue),
    child_started_events AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT id, 'run:started', jsonb_build_object('workflow', name, 'queue', queue, 'parentRunId', ${runId}::text),
             (SELECT t FROM clock)
        FROM children
      RETURNING 1),
    child_refused_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, id, 'step:' || status,
             CASE WHEN status = 'failed' THEN jsonb_build_object('error', error)
                  ELSE jsonb_build_object('childRunId', input->>'runId') END,
             true, (SELECT t FROM clock)
        FROM inserted WHERE kind = 'child' AND status IN ('failed', 'completed')
      RETURNING 1),`
          : sql``
      }
    cancelled_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, id, 'step:cancelled',
             CASE WHEN ended_with_run THEN jsonb_build_object('reason', 'the run ended', 'whileRunning', false)
                  ELSE jsonb_build_object('reason', 'the run was cancelled before this step could start') END,
             true, (SELECT t FROM clock)
        FROM inserted WHERE status = 'cancelled'
      RETURNING 1),
    marked AS (
      UPDATE ${n.steps} s
         SET delivered_seq = dl.delivered_seq,
             status = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = ${fusedStepId}::uuid THEN 'completed'
                           ELSE s.status END,
             finished_at = CASE WHEN s.id = ${fusedStepId}::uuid OR dl.fires_timer OR dl.signal_id IS NOT NULL
                                THEN ${outcomesAt}
                                ELSE s.finished_at END,
             next_run_at = CASE WHEN dl.fires_timer OR dl.signal_id IS NOT NULL OR s.id = ${fusedStepId}::uuid THEN NULL
                                ELSE s.next_run_at END,
             -- A signal wait's outcome: the signal it took, or its timeout; a fused step's, its completion's.
             output = CASE ${
               fused
                 ? sql`WHEN s.id = ${fused.completion.stepId}::uuid
                             THEN ${JSON.stringify(fused.completion.output ?? null)}::jsonb
                           `
                 : sql``
             }${
               signalsTaken
                 ? sql`WHEN dl.signal_id IS NOT NULL
                             THEN (SELECT jsonb_build_object('signalId', g.id::text, 'payload', g.payload) FROM taken g
                                    WHERE g.id = dl.signal_id)
                           `
                 : sql``
             }WHEN dl.fires_timer AND s.kind = 'signal' THEN '{"timedOut": true}'::jsonb
                           ELSE s.output END${
                             fused
                               ? sql`,
             -- The rest of a fused step's completion (the fence checked it holds the step), as completeSteps
             -- writes it.
             error = CASE WHEN s.id = ${fused.completion.stepId}::uuid THEN NULL ELSE s.error END,
             ended_nonce = CASE WHEN s.id = ${fused.completion.stepId}::uuid THEN s.nonce ELSE s.ended_nonce END`
                               : sql``
                           }
        FROM dl
       WHERE s.id = dl.id AND s.run_id = ${runId}::uuid AND EXISTS (SELECT 1 FROM go)
      RETURNING s.id, s.seq, s.kind, dl.fires_timer, dl.signal_id, s.fencing_token),${
        fused
          ? sql`
    completed_attempt AS (
      UPDATE ${n.attempts} a SET outcome = 'completed', ended_at = (SELECT t FROM step_clock)
        FROM marked m WHERE m.id = ${fused.completion.stepId}::uuid AND a.fencing_token = m.fencing_token
      RETURNING 1),`
          : sql``
      }
    fired_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, id, CASE WHEN kind = 'signal' THEN 'signal:timed-out' ELSE 'timer:fired' END,
             jsonb_build_object('seq', seq), true, (SELECT t FROM clock)
        FROM marked WHERE fires_timer
      RETURNING 1),
${
  signalsTaken
    ? sql`
    -- Each signal handed to a wait records the step that took it (the wait's own row holds the payload).
    consumed AS (
      UPDATE ${n.signals} g SET step_id = w.step_id, consumed_at = (SELECT t FROM clock)
        FROM (SELECT signal_id, id AS step_id, seq FROM marked WHERE signal_id IS NOT NULL
              UNION ALL
              SELECT p.signal_id, i.id, i.seq FROM planned p JOIN inserted i ON i.seq = p.seq
               WHERE p.signal_id IS NOT NULL) w
       WHERE g.id = w.signal_id AND g.run_id = ${runId}::uuid
      RETURNING g.id, g.name, w.step_id, w.seq),
    received_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, step_id, 'signal:received',
             jsonb_build_object('seq', seq, 'name', name, 'signalId', id::text), true, (SELECT t FROM clock)
        FROM consumed
      RETURNING 1),`
    : sql``
}
${
  rejecting
    ? sql`
    -- Each signal a wait refused (its payload does not fit the wait's schema) is undelivered, with why; the wait
    -- goes on waiting, and no later turn sees the signal.
    refused AS (
      UPDATE ${n.signals} g
         SET consumed_at = (SELECT t FROM clock),
             undelivered = jsonb_build_object('reason', 'invalid-payload', 'seq', x.seq, 'message', x.message)
        FROM jsonb_to_recordset(${JSON.stringify(rejected)}::jsonb) AS x("signalId" bigint, seq int, message text)
       WHERE g.id = x."signalId" AND g.run_id = ${runId}::uuid AND g.consumed_at IS NULL AND EXISTS (SELECT 1 FROM go)
      RETURNING g.id, g.name, x.seq, x.message),
    refused_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid,
             coalesce((SELECT i.id FROM inserted i WHERE i.seq = f.seq),
                      (SELECT s.id FROM ${n.steps} s
                        WHERE s.run_id = ${runId}::uuid AND s.seq = f.seq AND s.retired_at IS NULL)),
             'signal:rejected',
             jsonb_build_object('seq', f.seq, 'name', f.name, 'signalId', f.id::text, 'message', f.message), false,
             (SELECT t FROM clock)
        FROM refused f
      RETURNING 1),`
    : sql``
}${
    ending
      ? sql`
    -- A run that ends leaves no signal pending: each one no wait took is undelivered, the run's end its reason. A
    -- signal is stored under the run's row lock while the run goes on (sendSignal), so every signal is stored
    -- before this end, and marked here, or refused by its sender as RUN_ENDED.
    unseen AS (
      UPDATE ${n.signals} g
         SET consumed_at = (SELECT t FROM clock),
             undelivered = jsonb_build_object('reason', 'run-ended', 'status', ${status}::text)
       WHERE g.run_id = ${runId}::uuid AND g.consumed_at IS NULL AND EXISTS (SELECT 1 FROM go)
         AND g.id <> ALL(${settledSignalsArray}::bigint[])
      RETURNING g.id, g.name),
    unseen_events AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT ${runId}::uuid, 'signal:undelivered',
             jsonb_build_object('name', name, 'signalId', id::text, 'reason', 'run-ended', 'status', ${status}::text),
             false, (SELECT t FROM clock)
        FROM unseen
      RETURNING 1),`
      : sql``
  }
    -- The run's earliest timer: those it had (less the ones this turn fires) and those this turn starts (a
    -- statement does not see its own inserts).
    waiting AS (
      SELECT s.kind, s.name, s.next_run_at AS due FROM ${n.steps} s
       WHERE s.run_id = ${runId}::uuid AND s.kind IN ('timer', 'signal') AND s.status = 'scheduled'
         AND s.retired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM dl WHERE dl.id = s.id AND (dl.fires_timer OR dl.signal_id IS NOT NULL))
      UNION ALL
      SELECT kind, name, next_run_at FROM inserted WHERE kind IN ('timer', 'signal') AND status = 'scheduled'),
    -- Timers and signal waits' timeouts, those it had (less the ones this turn ends) and those it starts.
    next_timer AS (SELECT min(due) AS due FROM waiting),
    -- A pending signal that a wait of the run now waits for (one the turn did not see: it came after the turn's
    -- snapshot, or the turn made the wait without reading the run's signals, as a fused step's does).
    signal_due AS (
      SELECT EXISTS (
        SELECT 1 FROM ${n.signals} g
         WHERE g.run_id = ${runId}::uuid AND g.consumed_at IS NULL${
           signalsTaken || rejecting ? sql` AND g.id <> ALL(${settledSignalsArray}::bigint[])` : sql``
         }
           AND EXISTS (SELECT 1 FROM waiting w WHERE w.kind = 'signal' AND w.name = g.name)) AS due),
    -- The one write of the run row: its end, or its next turn (now if anything woke it since the claim).
    run_row AS (
      UPDATE ${n.runs} r
         SET turn_lease_expires_at = NULL,
             status = coalesce(${status}::text, ${fused ? sql`'running'` : sql`r.status`}),
             output = CASE WHEN ${ending} THEN ${output}::jsonb ELSE r.output END,
             error = CASE WHEN ${ending} THEN ${error}::jsonb ELSE r.error END,
             finished_at = CASE WHEN ${ending} THEN (SELECT t FROM clock) ELSE r.finished_at END,
             progress = CASE WHEN ${progress !== null} THEN ${progress}::jsonb ELSE r.progress END,
             turn_next_run_at = CASE WHEN ${ending} THEN NULL
                                     WHEN r.wake_count <> ${wakeCount} THEN (SELECT t FROM clock)
                                     WHEN (SELECT due FROM signal_due) THEN (SELECT t FROM clock)${
                                       childKeys
                                         ? sql`
                                     WHEN EXISTS (SELECT 1 FROM inserted
                                                   WHERE kind = 'child' AND status IN ('failed', 'completed'))
                                       THEN (SELECT t FROM clock)`
                                         : sql``
                                     }
                                     ELSE (SELECT due FROM next_timer) END${
                                       fused
                                         ? sql`,
             -- A fused step grants its turn here, as claimTurns grants one (see commitFusedTurn).
             turn_token = (SELECT token FROM turn_grant), turn_nonce = (SELECT nonce FROM turn_grant),
             turn_epoch = r.turn_epoch + 1,
             turn_attempt = r.turn_attempt + 1, turn_worker_id = ${fused.workerId},
             started_at = coalesce(r.started_at, (SELECT t FROM clock))`
                                         : sql``
                                     }
       WHERE r.id = (SELECT id FROM go)
      RETURNING r.id, r.queue, r.turn_next_run_at <= (SELECT t FROM clock) AS due_now, r.status, r.output, r.error,
                r.cancel_reason, r.turn_token, r.turn_nonce, r.turn_epoch, r.turn_attempt,
                r.parent_step_id, r.concurrency_key),
    turn_attempt AS (${
      grant.kind === 'claimed'
        ? sql`
      UPDATE ${n.attempts} SET outcome = 'completed', ended_at = (SELECT t FROM clock)
       WHERE fencing_token = ${grant.ref.token.toString()}::bigint AND outcome IS NULL AND EXISTS (SELECT 1 FROM go)`
        : sql`
      INSERT INTO ${n.attempts} (run_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at, outcome,
                                 ended_at)
      SELECT id, 'turn', turn_attempt, turn_epoch, turn_token, turn_nonce, ${grant.fused.workerId}, (SELECT t FROM clock),
             'completed', (SELECT t FROM clock)
        FROM run_row`
    }
      RETURNING 1),
    -- Every live step ends with the run, running ones included (invariant 12: the holder's next write is
    -- refused as "cancelled" and its signal fires), each from its newest version (locked above).
    leftover AS (
      UPDATE ${n.steps} s SET status = 'cancelled', finished_at = (SELECT t FROM clock), next_run_at = NULL,
                              cancel_requested_at = coalesce(s.cancel_requested_at, (SELECT t FROM clock))
        FROM locked l
       WHERE ${ending} AND s.id = l.id AND l.status IN ('scheduled', 'running') AND EXISTS (SELECT 1 FROM go)
         AND NOT EXISTS (SELECT 1 FROM dl WHERE dl.id = l.id)
      RETURNING s.id, s.attempt, s.epoch, s.fencing_token, l.status AS prev_status, s.kind,
                s.input->>'runId' AS child_run_id, s.input->>'cancellation' AS cancellation),
    leftover_attempts AS (
      UPDATE ${n.attempts} a SET outcome = 'cancelled', ended_at = (SELECT t FROM clock)
        FROM leftover l WHERE l.prev_status = 'running' AND a.fencing_token = l.fencing_token AND a.outcome IS NULL
      RETURNING 1),
    leftover_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, data, terminal, at)
      SELECT ${runId}::uuid, id, 'step:cancelled', attempt, epoch, fencing_token,
             jsonb_build_object('reason', 'the run ended', 'whileRunning', prev_status = 'running'), true,
             (SELECT t FROM clock)
        FROM leftover
      RETURNING 1),
${
  ending
    ? sql`
    -- The end of a child run completes its parent's step (still running: a cancel of the parent ended it already)
    -- with its output, or fails it with a ChildWorkflowFailure carrying its failure, and wakes the parent.
    parent_step AS (
      UPDATE ${n.steps} s
         SET status = CASE WHEN ${status}::text = 'completed' THEN 'completed' ELSE 'failed' END,
             output = CASE WHEN ${status}::text = 'completed' THEN ${output}::jsonb END,
             error = CASE WHEN ${status}::text = 'completed' THEN NULL
                          ELSE jsonb_build_object(
                                 'type', 'ChildWorkflowFailure', 'nonRetryable', true, 'childRunId', ${runId}::text,
                                 'message', 'child workflow run ' || ${runId}::text || ' ' || ${status}::text,
                                 'cause', ${error}::jsonb) END,
             finished_at = (SELECT t FROM clock)
        FROM run_row r
       WHERE s.id = r.parent_step_id AND s.kind = 'child' AND s.status = 'running' AND s.retired_at IS NULL
      RETURNING s.id, s.run_id, s.seq, s.status, s.error),
    parent_step_event AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT run_id, id, 'step:' || status,
             jsonb_build_object('childRunId', ${runId}::text) || CASE WHEN error IS NOT NULL
                                                                    THEN jsonb_build_object('error', error)
                                                                    ELSE '{}'::jsonb END,
             true, (SELECT t FROM clock)
        FROM parent_step
      RETURNING 1),
    -- Children still running that the end cancels (cancellation 'cascade'): marked here, durably, and woken — a
    -- parent's run row and steps are locked before its children's. cascadeToChildren then ends their live steps
    -- after the commit, as a cancel does; a child whose process died before that still sees the cancel at its next
    -- step.
    cascaded AS (
      UPDATE ${n.runs} c
         SET cancel_requested_at = coalesce(c.cancel_requested_at, (SELECT t FROM clock)),
             cancel_reason = coalesce(c.cancel_reason, 'its parent run ended with it running'),
             turn_next_run_at = (SELECT t FROM clock), wake_count = c.wake_count + 1
        FROM leftover l
       WHERE l.kind = 'child' AND l.cancellation = 'cascade' AND c.id = (l.child_run_id)::uuid
         AND c.status IN ('pending', 'running')
      RETURNING c.id, c.queue),
    cascaded_events AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT id, 'run:cancel-requested', jsonb_build_object('reason', 'its parent run ended with it running'),
             (SELECT t FROM clock)
        FROM cascaded
      RETURNING 1),
    parent_woken AS (
      UPDATE ${n.runs} p
         SET turn_next_run_at = least(coalesce(p.turn_next_run_at, (SELECT t FROM clock)), (SELECT t FROM clock)),
             wake_count = p.wake_count + 1
       WHERE p.id = (SELECT run_id FROM parent_step) AND p.status IN ('pending', 'running')
      RETURNING p.queue),`
    : sql``
}
    run_event AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT id, 'run:' || ${status}::text,
             CASE WHEN ${error}::jsonb IS NOT NULL THEN jsonb_build_object('error', ${error}::jsonb) END,
             true, (SELECT t FROM clock)
        FROM run_row WHERE ${ending}
      RETURNING 1),
    ${
      progress !== null
        ? sql`-- What the turn set with ctx.setProgress, as an event too (what handle.watch() streams) when it changed:
    -- a turn that replayed the code from its start sets again what earlier turns set. The read of runs here sees
    -- the row as the statement's snapshot has it, before run_row's write.
    progress_event AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT id, 'run:progress', jsonb_build_object('value', ${progress}::jsonb), (SELECT t FROM clock) FROM run_row
       WHERE (SELECT p.progress FROM ${n.runs} p WHERE p.id = ${runId}::uuid) IS DISTINCT FROM ${progress}::jsonb
      RETURNING 1),`
        : sql``
    }
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
    )}
    SELECT ${fused ? sql`EXISTS (SELECT 1 FROM go)` : sql`EXISTS (SELECT 1 FROM fence)`} AS fenced,
           (SELECT conflict FROM gate) AS conflict,
           ${
             fused
               ? sql`(SELECT count(*) FROM completed_attempt) AS completed_attempts,
           (SELECT jsonb_build_object('epoch', turn_epoch, 'attempt', turn_attempt, 'token', turn_token::text)
              FROM run_row) AS turn,`
               : sql``
           }
           (SELECT count(*) FROM notified) AS notified,${
             ending
               ? sql`
           (SELECT jsonb_agg(id::text) FROM cascaded) AS cascade_children,`
               : sql``
           }
           (SELECT jsonb_build_object('status', status, 'output', output, 'error', error, 'cancel_reason', cancel_reason)
              FROM run_row WHERE ${ending}) AS ended,
           (SELECT jsonb_agg(jsonb_build_object(
              'id', e.id::text, 'run_id', ${runId}::text, 'seq', e.seq, 'name', e.name, 'queue', e.queue,
              'input', e.input, 'attempt', e.attempt, 'epoch', e.epoch, 'token', e.fencing_token::text,
              'nonce', e.nonce::text, 'lease_ms', e.lease_ms, 'start_to_close_timeout_ms', e.start_to_close_timeout_ms,
              'retry_policy', e.retry_policy, 'heartbeat_details', NULL,
              'remaining_ms', (extract(epoch FROM (e.lease_expires_at - ${n.now})) * 1000)::float8,
              'prev_token', NULL, 'fencing_scope', e.fencing_scope, 'next_due_ms', NULL) ORDER BY e.seq)
              FROM inserted e WHERE e.kind = 'activity' AND e.status = 'running') AS eager_steps`);
  return rows[0];
}

/** Hand a turn back (fenced), due now, not charged: used when its commit raced with a change it read. */
export async function releaseTurn(db: Database, n: SchemaNames, ref: TurnRef): Promise<boolean> {
  const rows = await db.rows<{ id: string }>(sql`
    WITH lk AS MATERIALIZED (SELECT r.id FROM ${n.runs} r WHERE r.id = ${ref.runId}::uuid FOR NO KEY UPDATE OF r),
    lock_clock AS MATERIALIZED (SELECT ${n.now} AS now_at FROM (SELECT count(*) FROM lk) x),
    r AS (
      UPDATE ${n.runs} SET turn_lease_expires_at = NULL, turn_next_run_at = ${n.now}
       WHERE id = ${ref.runId}::uuid AND turn_token = ${ref.token.toString()}::bigint AND turn_nonce = ${ref.nonce}::uuid
         AND turn_lease_expires_at > (SELECT now_at FROM lock_clock)
      RETURNING id, queue),
    a AS (
      UPDATE ${n.attempts} SET outcome = 'released', ended_at = ${n.now}
       WHERE fencing_token = ${ref.token.toString()}::bigint AND EXISTS (SELECT 1 FROM r)
      RETURNING 1)
    SELECT id::text, pg_notify(${n.channel}, 'turn:' || queue), (SELECT count(*) FROM a) FROM r`);
  return rows.length > 0;
}

/** Record a turn commit rejected by the fence, and throw {@link LeaseLostError}. */
async function rejectTurn(db: Database, n: SchemaNames, ref: TurnRef): Promise<never> {
  const token = ref.token.toString();
  const rows = await db.rows<{ current_token: string | null; reason: string }>(sql`
    WITH cur AS (
      SELECT id, turn_token, status, turn_lease_expires_at <= ${n.now} AS expired
        FROM ${n.runs} WHERE id = ${ref.runId}::uuid FOR SHARE),
    ev AS (
      INSERT INTO ${n.events} (run_id, type, attempt, fencing_token, data, at)
      SELECT id, 'attempt:stale-rejected', ${ref.attempt}, ${token}::bigint,
             jsonb_build_object('operation', 'turn-commit', 'staleToken', ${token}::text,
                                'currentToken', turn_token::text,
                                'reason', CASE WHEN turn_token IS DISTINCT FROM ${token}::bigint THEN 'superseded'
                                               WHEN status NOT IN ('pending', 'running') THEN status ELSE 'expired' END),
             ${n.now}
        FROM cur
      RETURNING data),
    a AS (
      UPDATE ${n.attempts} SET outcome = coalesce(outcome, 'rejected_stale'), ended_at = coalesce(ended_at, ${n.now})
       WHERE fencing_token = ${token}::bigint
      RETURNING 1)
    SELECT (SELECT turn_token::text FROM cur) AS current_token, coalesce((SELECT data->>'reason' FROM ev), 'run not found') AS reason,
           (SELECT count(*) FROM a) AS ended`);
  const row = rows[0];
  throw new LeaseLostError({
    operation: 'complete',
    stepLabel: `${ref.workflowName} turn`,
    runId: ref.runId,
    attempt: ref.attempt,
    staleToken: ref.token,
    currentToken: row?.current_token != null ? BigInt(row.current_token) : null,
    reason: row?.reason ?? 'run not found',
  });
}
