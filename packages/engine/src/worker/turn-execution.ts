/**
 * One claimed or eager turn, as the worker's turn loop runs it: continue the run's kept workflow instance with
 * what is new, or replay the run in full ({@link startTurn}); then commit the result fenced on the turn's token
 * ({@link commitTurn}), granting the steps it schedules to this worker's free activity slots (eager dispatch), and
 * keep the instance when the turn committed blocked.
 */
import { storableFailure } from '@palisade/sdk/internal';
import type { EndedRun } from '../db/notification-hub.js';
import { isContentRefusal } from '../infra-retry.js';
import { faultHooks } from '../internal/fault-points.js';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import { loadRunHistory, readHistoryNews, type ClaimedTurnRow } from '../queries/claim-turns.js';
import { commitTurn } from '../queries/commit-turn.js';
import type { TurnParams, TurnResult, WorkflowInstance } from '../turn/contract.js';
import { startTurn } from '../turn/run-turn.js';
import { INSTANCE_WAIT_LEASE_FRACTION, canContinue, type KeptInstance } from './instance-cache.js';
import { monotonicNow } from './lease-clock.js';
import { nodeTurnHost } from './non-durable-await.js';
import {
  announceCommitted,
  attemptRefsOf,
  turnFaultOf,
  turnRefOf,
  type TurnLoopParts,
} from './turn-parts.js';

/** A turn that ran: its result, the instance it leaves, and whether it continued a kept one. */
interface RanTurn {
  readonly result: TurnResult;
  readonly instance: WorkflowInstance | undefined;
  readonly replay: 'full' | 'continued';
}

/** The parameters of the turn `row` grants, as the workflow code sees them. */
function turnParamsOf(row: ClaimedTurnRow): TurnParams {
  return {
    info: Object.freeze({
      runId: row.id,
      workflowName: row.name,
      turnAttempt: row.turn_attempt,
      queue: row.queue,
    }),
    priority: row.priority,
    nowMs: row.now_ms,
    ...(row.started_ms !== null ? { startedMs: row.started_ms } : {}),
    cancelRequested: row.cancel_requested,
    signals: row.signals ?? [],
  };
}

/**
 * Run the turn `row` grants: on the run's kept instance when nothing but new outcomes changed its history since
 * ({@link canContinue}), else a full replay over the history read now. `kept` was taken out of the cache for
 * this turn: it goes back only once this turn has committed blocked.
 */
async function runClaimedTurn(
  parts: TurnLoopParts,
  row: ClaimedTurnRow,
  kept: KeptInstance | undefined,
): Promise<RanTurn | undefined> {
  const workflow = parts.options.workflows.get(row.name);
  if (!workflow) return undefined; // unreachable: the claim filters by our workflow names
  const params = turnParamsOf(row);
  // The grant carries the news unless its snapshot may have missed a writer of the history that committed
  // before it locked the run. Then, if this worker ran the previous turn and kept its instance, the news is
  // read on its own (a snapshot taken now, as a full replay's read is), not the whole history.
  const news =
    row.history_news ??
    (kept && row.ran_last_turn && row.turn_epoch === kept.turnEpoch + 1
      ? await readHistoryNews(parts.db, parts.names, row.id, row.now_ms)
      : null);
  if (kept && news && canContinue(kept, { turnEpoch: row.turn_epoch, news })) {
    const result = await kept.instance.continueTurn({ ...params, fresh: news.fresh });
    if (result) return { result, instance: kept.instance, replay: 'continued' };
  }
  // The run's first turn grant ever (turn epochs only grow, retries included): no turn has committed, so
  // the run has no steps to read.
  const history = row.turn_epoch === 1 ? [] : await loadRunHistory(parts.db, parts.names, row.id);
  const { result, instance } = await startTurn({
    ...params,
    host: nodeTurnHost,
    workflow,
    input: row.input,
    history,
  });
  return { result, instance, replay: 'full' };
}

/**
 * Commit `result`, the turn `row` grants, with eager dispatch of the activities it schedules. A turn the database
 * refuses to store for a value's content fails the run instead (recorded as `UnstorableTurn`).
 * @returns what was committed, and the run's end as stored when the commit ended it.
 */
async function commitClaimedTurn(
  parts: TurnLoopParts,
  row: ClaimedTurnRow,
  grant: 'claimed' | 'eager',
  result: TurnResult,
): Promise<{ committed: TurnResult; ended: EndedRun | undefined }> {
  const ref = turnRefOf(row, parts.options.turnLeaseMs);
  let committed = result;
  const beforeCommit = faultHooks['turn:before-commit'];
  if (beforeCommit) await beforeCommit(turnFaultOf(row, grant));
  // Eager dispatch only for a turn that schedules activities (a reservation holds slots until the commit ends).
  const scheduled = result.newSteps.filter((s) => s.kind === 'activity' && !s.cancelled).length;
  const dispatch = scheduled > 0 ? parts.options.dispatch : undefined;
  let reserved = dispatch?.reserve(scheduled);
  let granted: readonly ClaimedStepRow[] = [];
  const sentAtMs = monotonicNow();
  // The run's end as stored, when this commit ends it: the result waiters of this process are answered from it.
  let ended: EndedRun | undefined;
  try {
    ({ eagerSteps: granted, ended } = await commitTurn(parts.db, parts.names, ref, result, reserved));
  } catch (error) {
    if (reserved) dispatch?.adopt(reserved, [], sentAtMs); // nothing was granted: the commit rolled back
    reserved = undefined;
    // The database refused the turn for a value's content (the commit rolled back; the turn still holds its
    // lease). Replaying cannot change that: the same code makes the same values, so the turn would fail every
    // lease, forever, and a cancel could never end the run. Fail the run instead, recorded, with the reason.
    if (!isContentRefusal(error)) throw error;
    const message = error instanceof Error ? error.message : String(error);
    committed = {
      newSteps: [],
      deliveries: [],
      outcome: {
        kind: 'failed',
        error: storableFailure({
          type: 'UnstorableTurn',
          message: `the database refused to store a turn of workflow ${row.name}: ${message}`,
          nonRetryable: true,
        }),
      },
    };
    parts.logger.warn({ err: error, runId: row.id }, 'turn:unstorable');
    ({ ended } = await commitTurn(parts.db, parts.names, ref, committed));
  }
  try {
    const beforeStart = faultHooks['dispatch:before-start'];
    if (beforeStart && granted.length > 0) {
      await beforeStart(turnFaultOf(row, grant), attemptRefsOf(granted));
    }
  } finally {
    if (reserved) dispatch?.adopt(reserved, granted, sentAtMs);
  }
  return { committed, ended };
}

/** Run and commit the turn `row` grants. @returns the run's end as stored, when this turn ended it. */
export async function executeTurn(
  parts: TurnLoopParts,
  row: ClaimedTurnRow,
  grant: 'claimed' | 'eager',
): Promise<EndedRun | undefined> {
  if (!parts.options.workflows.has(row.name)) return undefined; // unreachable: the claim filters by our names
  const beforeRun = faultHooks['turn:before-run'];
  if (beforeRun) await beforeRun(turnFaultOf(row, grant));
  // No later than the grant's database time (row.now_ms) in monotonic time: a kept instance's clock bound.
  const grantedAtMs = monotonicNow();
  // A turn of this worker that still holds the run's instance (its commit's reply not yet seen) puts it back or
  // drops it first (see InstanceCache.returned); a holder slower than a quarter of the lease is not waited for.
  const kept = await parts.instances.takeWhenBack(
    row.id,
    parts.options.turnLeaseMs / INSTANCE_WAIT_LEASE_FRACTION,
  );
  try {
    return await runAndCommit(parts, row, grant, grantedAtMs, kept);
  } finally {
    if (kept) parts.instances.release(row.id);
  }
}

/** {@link executeTurn} once the run's instance is not out for another turn of this worker. */
async function runAndCommit(
  parts: TurnLoopParts,
  row: ClaimedTurnRow,
  grant: 'claimed' | 'eager',
  grantedAtMs: number,
  kept: KeptInstance | undefined,
): Promise<EndedRun | undefined> {
  const ran = await runClaimedTurn(parts, row, kept);
  if (!ran) return undefined;
  const { committed, ended } = await commitClaimedTurn(parts, row, grant, ran.result);
  const afterCommit = faultHooks['turn:after-commit'];
  if (afterCommit) await afterCommit(turnFaultOf(row, grant));
  if (committed.outcome.kind === 'blocked' && ran.instance?.continuable) {
    parts.instances.put(row.id, {
      instance: ran.instance,
      turnEpoch: row.turn_epoch,
      turnAttempt: row.turn_attempt,
      wakeCount: row.wake_count,
      workflowName: row.name,
      queue: row.queue,
      priority: row.priority,
      dbNowMs: row.now_ms,
      atMonotonicMs: grantedAtMs,
    });
  }
  announceCommitted(parts, row.id, row.name, committed.outcome, ran.replay, grant);
  return ended;
}
