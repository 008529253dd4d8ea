/**
 * A fused step (see `TurnLoop.completeFused`): the run's next turn on the instance this worker kept, with the
 * completing step's output as the only news, recorded with the completion in one statement ({@link commitFusedTurn}).
 */
import type { EndedRun } from '../db/notification-hub.js';
import { faultHooks, type TurnFault } from '../internal/fault-points.js';
import { commitFusedTurn, type CommittedFusedTurn } from '../queries/commit-turn.js';
import { attemptRefOf, type CompleteStepParams, type StepPosition } from '../queries/complete-step.js';
import { asStoredJson } from '../turn/stored-json.js';
import type { KeptInstance } from './instance-cache.js';
import { monotonicNow } from './lease-clock.js';
import { announceCommitted, attemptRefsOf, type TurnLoopParts } from './turn-parts.js';

/**
 * Run the fused turn of `completion` (the step at `step`) on `kept`, taken out of the cache by the caller, and
 * commit it with the completion; keep the instance again when the turn committed blocked.
 * @returns `'applied'` when the statement committed the completion; undefined when it did not apply (nothing was
 * written: the ordinary completion follows) or the instance could not be continued.
 */
export async function runFusedTurn(
  parts: TurnLoopParts,
  kept: KeptInstance,
  completion: CompleteStepParams,
  step: StepPosition,
): Promise<'applied' | undefined> {
  const runId = completion.runId;
  const atMonotonicMs = monotonicNow();
  const nowMs = kept.dbNowMs + Math.max(0, atMonotonicMs - kept.atMonotonicMs);
  const fault: TurnFault = {
    runId,
    workflowName: kept.workflowName,
    token: completion.token,
    turnAttempt: kept.turnAttempt + 1,
    grant: 'fused',
  };
  const beforeRun = faultHooks['turn:before-run'];
  if (beforeRun) await beforeRun(fault);
  const settled = parts.options.results?.turnRunning(runId);
  let ended: EndedRun | undefined;
  try {
    const result = await kept.instance.continueTurn({
      info: Object.freeze({
        runId,
        workflowName: kept.workflowName,
        turnAttempt: kept.turnAttempt + 1,
        queue: kept.queue,
      }),
      priority: kept.priority,
      nowMs,
      cancelRequested: false,
      fresh: [
        {
          id: completion.stepId,
          seq: step.seq,
          kind: 'activity',
          name: step.name,
          status: 'completed',
          output: asStoredJson(completion.output),
          error: null,
          delivered_seq: null,
          due_ms: null,
          finished_ms: nowMs,
        },
      ],
    });
    if (!result) return undefined;
    const beforeCommit = faultHooks['turn:before-commit'];
    if (beforeCommit) await beforeCommit(fault);
    const completionRef = [attemptRefOf(completion)];
    const beforeSend = faultHooks['completion:before-send'];
    if (beforeSend) await beforeSend(completionRef);
    const scheduled = result.newSteps.filter((s) => s.kind === 'activity' && !s.cancelled).length;
    const dispatch = scheduled > 0 ? parts.options.dispatch : undefined;
    const reserved = dispatch?.reserve(scheduled);
    const sentAtMs = monotonicNow();
    let committed: CommittedFusedTurn | undefined;
    try {
      committed = await commitFusedTurn(
        parts.db,
        parts.names,
        {
          runId,
          workflowName: kept.workflowName,
          workerId: parts.options.workerId,
          turnEpoch: kept.turnEpoch,
          turnAttempt: kept.turnAttempt,
          wakeCount: kept.wakeCount,
          nowMs,
          completion,
        },
        result,
        reserved,
      );
    } finally {
      if (reserved && !committed?.eagerSteps.length) dispatch?.adopt(reserved, [], sentAtMs);
    }
    // Not applied: nothing was written, and the ordinary completion that follows reports its own outcome.
    if (!committed.applied || !committed.turn) return undefined;
    const afterCommit = faultHooks['completion:after-commit'];
    if (afterCommit) await afterCommit(completionRef.map((attempt) => ({ attempt, outcome: 'applied' })));
    ended = committed.ended;
    if (reserved && committed.eagerSteps.length > 0) {
      try {
        const beforeStart = faultHooks['dispatch:before-start'];
        if (beforeStart) await beforeStart(fault, attemptRefsOf(committed.eagerSteps));
      } finally {
        dispatch?.adopt(reserved, committed.eagerSteps, sentAtMs);
      }
    }
    if (result.outcome.kind === 'blocked' && kept.instance.continuable) {
      parts.instances.put(runId, {
        ...kept,
        turnEpoch: committed.turn.epoch,
        turnAttempt: committed.turn.attempt,
        dbNowMs: nowMs,
        atMonotonicMs,
      });
    }
    announceCommitted(parts, runId, kept.workflowName, result.outcome, 'continued', 'fused');
    return 'applied';
  } finally {
    settled?.(ended);
  }
}
