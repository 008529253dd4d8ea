/** A cancel request reaching the code: the steps it is blocked on are recorded cancelled, one at a time. */
import { CancelledFailure } from '@palisade/sdk';
import type { NewStep } from '../contract.js';
import type { Deferred, ReplayState } from '../replay-state.js';

/**
 * Deliver a cancel request the code has not seen, once it is blocked. A cancel requested before any step it could
 * end existed (before the first turn, or while a turn that did not know of it was scheduling) has not reached the
 * code: the steps this turn scheduled and the code is blocked on are recorded cancelled, as the request would have
 * ended them, and their awaits reject one at a time in position order (recorded by delivered_seq, so replay
 * repeats it). What the code schedules after seeing the cancel (compensation in catch/finally) runs normally.
 * @returns false when there was nothing to cancel (no request, seen already, or no such step).
 */
export async function deliverCancel(state: ReplayState): Promise<boolean> {
  if (!state.current.cancelRequested || state.cancelSeen) return false;
  const blockedOn = state.newSteps.filter(
    (s) => s.kind !== 'value' && state.requested.get(s.seq)?.settled === false,
  );
  if (blockedOn.length === 0) return false;
  for (const s of blockedOn) {
    if (!state.running()) break;
    const d = state.requested.get(s.seq) as Deferred;
    d.settled = true;
    state.cancelSeen = true;
    state.advanceClock();
    state.seenDeliveredSeq = state.nextDeliveredSeq;
    state.newSteps[state.newSteps.indexOf(s)] = {
      ...s,
      cancelled: true,
      deliveredSeq: state.nextDeliveredSeq++,
    } as NewStep;
    d.reject(new CancelledFailure(`step ${s.name}#${s.seq} was cancelled`, { runId: state.runId }));
    await state.drain();
  }
  return true;
}
