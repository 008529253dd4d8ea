/**
 * The end of a turn: its {@link TurnResult} from the replay state — blocked on pending steps, or the run's end
 * (the checked output, the code's failure, a cancellation), or a failure replay detected (non-determinism, a
 * non-durable await).
 */
import { NonDeterminismError, PAYLOAD_LIMITS, PalisadeError, serializeFailure } from '@palisade/sdk';
import { checkPayload, validate } from '@palisade/sdk/internal';
import type { TurnResult } from './contract.js';
import type { KnownStep, ReplayState } from './replay-state.js';

/** A turn that fails the run with `error`: nothing it scheduled or delivered is kept. */
function failedTurn(error: unknown): TurnResult {
  return { newSteps: [], deliveries: [], outcome: { kind: 'failed', error: serializeFailure(error) } };
}

/**
 * Code that ends before reaching a recorded step no longer accounts for its history (the step was removed, or
 * moved after the return): stop the run rather than complete it over work the code does not know of.
 */
function checkHistoryReached(state: ReplayState): void {
  if (!state.settled || state.nonDurable) return;
  let unreached: [number, KnownStep] | undefined;
  for (const entry of state.known) {
    if (entry[0] >= state.position && (!unreached || entry[0] < unreached[0])) unreached = entry;
  }
  if (unreached) {
    state.fatal ??= new NonDeterminismError(
      state.workflowName,
      unreached[0],
      `${unreached[1].kind} ${unreached[1].name}`,
      'no call (the workflow ended first)',
      state.runId,
    );
  }
}

/** The turn's result, before progress and rejected signals are added ({@link finishTurn}). */
function turnOutcome(state: ReplayState): TurnResult {
  const { newSteps, deliveries, workflowName, runId } = state;
  checkHistoryReached(state);
  if (state.fatal) return failedTurn(state.fatal);
  if (state.nonDurable) {
    return failedTurn(
      new PalisadeError(
        'NON_DURABLE_AWAIT',
        `workflow ${workflowName} started a ${state.nonDurable} (a timer or I/O) inside workflow code; workflow ` +
          'code may only await ctx.run, ctx.sleep, ctx.sleepUntil and ctx.waitForSignal — ' +
          'move the work into an activity',
        { runId },
      ),
    );
  }
  const done = state.settled;
  if (!done) {
    const pending =
      [...state.requested.values()].filter((d) => !d.settled).length +
      newSteps.filter(
        (s) => s.kind !== 'value' && !s.cancelled && !(s.kind === 'signal' && s.signalId !== undefined),
      ).length;
    if (pending === 0) {
      return failedTurn(
        new PalisadeError(
          'NON_DURABLE_AWAIT',
          `workflow ${workflowName} is waiting on a promise that is not a durable primitive (no step is pending); ` +
            'workflow code may only await ctx.run, ctx.sleep, ctx.sleepUntil and ctx.waitForSignal',
          { runId },
        ),
      );
    }
    return { newSteps, deliveries, outcome: { kind: 'blocked' } };
  }
  if (done.ok) {
    try {
      const what = `output of workflow ${workflowName}`;
      const output: unknown = validate(state.workflow.output, done.value, what, { runId });
      // An output the database cannot store (or that would not come back from result() as it is) fails the run
      // here, recorded, rather than a commit that fails and replays the turn forever.
      checkPayload(output, what, PAYLOAD_LIMITS.outputBytes, { runId });
      return { newSteps, deliveries, outcome: { kind: 'completed', output } };
    } catch (error) {
      return { newSteps, deliveries, outcome: { kind: 'failed', error: serializeFailure(error) } };
    }
  }
  const error = serializeFailure(done.error);
  const cancelled =
    state.current.cancelRequested && (done.error as { code?: unknown } | undefined)?.code === 'CANCELLED';
  return {
    newSteps,
    deliveries,
    outcome: cancelled ? { kind: 'cancelled', error } : { kind: 'failed', error },
  };
}

/**
 * Close the turn in progress: its result, with the rejected signals and the progress it set (none when it fails
 * the run). A blocked turn's new steps become known steps for the next turn of the instance.
 */
export function finishTurn(state: ReplayState): TurnResult {
  const result = turnOutcome(state);
  state.lastOutcome = result.outcome.kind;
  if (result.outcome.kind === 'blocked') {
    for (const s of result.newSteps) {
      state.known.set(s.seq, { kind: s.kind, name: s.name, output: s.kind === 'value' ? s.output : null });
    }
  }
  state.busy = false;
  const withRejected =
    state.rejectedSignals.length > 0 ? { ...result, rejectedSignals: state.rejectedSignals } : result;
  return state.progress && result.outcome.kind !== 'failed'
    ? { ...withRejected, progress: state.progress }
    : withRejected;
}
