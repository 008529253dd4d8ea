/** Pending signals reaching the code: which signal wait a signal goes to, and handing it over as the outcome. */
import type { NewStep, PendingSignal } from '../contract.js';
import { settleMapped, type Deferred, type ReplayState } from '../replay-state.js';

/**
 * The signal wait a pending signal named `name` goes to: the code's earliest unsettled wait for it with no
 * recorded outcome (`ended`), or undefined.
 */
export function waitFor(state: ReplayState, name: string, ended: ReadonlySet<number>): number | undefined {
  let found: number | undefined;
  for (const [seq, d] of state.requested) {
    if (d.kind === 'signal' && d.name === name && !d.settled && !ended.has(seq) && (found ?? seq + 1) > seq) {
      found = seq;
    }
  }
  return found;
}

/**
 * Hand pending signal `signal` to the wait at `seq`, as its outcome, in delivery order: a wait this turn made is
 * recorded completed with it, one recorded earlier is completed by the commit (by position: a kept instance
 * does not know the ids of the steps its turns recorded).
 */
export function handSignal(state: ReplayState, signal: PendingSignal, seq: number): void {
  const d = state.requested.get(seq) as Deferred;
  d.settled = true;
  state.advanceClock();
  state.seenDeliveredSeq = state.nextDeliveredSeq;
  const deliveredSeq = state.nextDeliveredSeq++;
  const made = state.newSteps.findIndex((s) => s.seq === seq);
  if (made >= 0) {
    state.newSteps[made] = { ...state.newSteps[made], signalId: signal.id, deliveredSeq } as NewStep;
  } else {
    state.deliveries.push({ stepId: null, seq, deliveredSeq, firesTimer: false, signalId: signal.id });
  }
  settleMapped(d, { signalId: signal.id, payload: signal.payload });
}
