/**
 * Recorded outcomes reaching the code: which steps have one by the turn's time, and how each settles the await
 * that is waiting for it (a value, an `ActivityFailure`, a `ChildWorkflowFailure`, a `CancelledFailure`).
 */
import {
  ActivityFailure,
  CancelledFailure,
  ChildWorkflowFailure,
  type SerializedFailure,
} from '@palisade/sdk';
import type { HistoryStepRow } from '../contract.js';
import { settleMapped, type ReplayState } from '../replay-state.js';
import { isTerminalStepStatus } from '../state-machine.js';

/** A child step's stored failure: what the parent's commit wrote when the child ended (see commitTurn). */
interface ChildStepFailure {
  readonly childRunId?: string;
  readonly cause?: SerializedFailure;
}

/** Whether a recorded step has an outcome to hand to the code by `nowMs`, and which way it settles the await. */
export function outcomeOf(h: HistoryStepRow, nowMs: number): 'resolve' | 'reject' | undefined {
  if (h.kind === 'timer' || h.kind === 'signal') {
    if (h.status === 'completed') return 'resolve';
    if (h.status === 'cancelled') return 'reject';
    if (h.status === 'scheduled' && h.due_ms !== null && h.due_ms <= nowMs) return 'resolve';
    return undefined;
  }
  if ((h.kind === 'activity' || h.kind === 'child') && isTerminalStepStatus(h.status))
    return h.status === 'completed' ? 'resolve' : 'reject';
  return undefined;
}

/**
 * Settle the code's await of step `h` with its recorded outcome (nothing if the code does not await it, or it is
 * settled already), and advance the code's clock to it. A cancelled step tells the code of the cancel.
 */
export function deliver(state: ReplayState, h: HistoryStepRow): void {
  const d = state.requested.get(h.seq);
  if (!d || d.settled) return;
  d.settled = true;
  state.advanceClock(h);
  const { runId } = state;
  if (outcomeOf(h, state.current.nowMs) === 'resolve') {
    if (h.kind === 'timer') d.resolve(undefined);
    // A signal wait that is still scheduled here is one this turn sees time out.
    else if (h.kind === 'signal') settleMapped(d, h.status === 'scheduled' ? { timedOut: true } : h.output);
    else if (h.kind === 'child') settleMapped(d, h.output);
    else d.resolve(h.output);
  } else if (h.status === 'cancelled') {
    state.cancelSeen = true;
    d.reject(new CancelledFailure(`step ${h.name}#${h.seq} was cancelled`, { runId, stepId: h.id }));
  } else if (h.kind === 'child') {
    const stored = (h.error ?? {}) as ChildStepFailure & SerializedFailure;
    d.reject(
      new ChildWorkflowFailure(h.name, stored.childRunId, stored.cause ?? stored, { runId, stepId: h.id }),
    );
  } else d.reject(new ActivityFailure(h.name, h.error as SerializedFailure, { runId, stepId: h.id }));
}
