import { sql } from 'drizzle-orm';
import { LeaseLostError } from '@palisade/sdk';
import type { Database } from '../db/database.js';
import { requestCancel } from './request-cancel.js';
import { withInfraRetry } from '../infra-retry.js';
import type { SchemaNames } from './schema-names.js';
import { planTurnCommit } from './turn-commit/plan.js';
import type { TurnStatementRow } from './turn-commit/result.js';
import { turnCommitStatement } from './turn-commit/statement.js';
import {
  NO_EAGER_DISPATCH,
  type CommittedFusedTurn,
  type CommittedTurn,
  type EagerDispatch,
  type FusedTurnRef,
  type TurnGrant,
  type TurnRecord,
  type TurnRef,
} from './turn-commit/types.js';
import { liveRunStatuses } from './status-sql.js';

export type { CommittedFusedTurn, CommittedTurn, EagerDispatch, FusedTurnRef, TurnRecord, TurnRef };

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
 * (fence passed, no conflict). The statement is planned once (`turn-commit/plan.ts`) and assembled, one piece per
 * part above, in `turn-commit/statement.ts`; `turn-commit/__snapshots__/` shows its text for each kind of turn.
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

/** The one statement of {@link commitTurn} and {@link commitFusedTurn}: planned, assembled, sent. */
async function turnStatement(
  db: Database,
  n: SchemaNames,
  grant: TurnGrant,
  result: TurnRecord,
  dispatch: EagerDispatch,
): Promise<TurnStatementRow | undefined> {
  const rows = await db.rows<TurnStatementRow>(
    turnCommitStatement(n, planTurnCommit({ grant, result, dispatch })),
  );
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
      UPDATE ${n.attemptRecords} SET outcome = 'released', ended_at = ${n.now}
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
                                               WHEN status NOT IN ${liveRunStatuses} THEN status ELSE 'expired' END),
             ${n.now}
        FROM cur
      RETURNING data),
    a AS (
      UPDATE ${n.attemptRecords} SET outcome = coalesce(outcome, 'rejected_stale'), ended_at = coalesce(ended_at, ${n.now})
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
