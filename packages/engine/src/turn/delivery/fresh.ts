/**
 * A turn's new outcomes reaching the code: the steps' outcomes no turn delivered yet and the pending signals,
 * merged in the order they happened and handed over one at a time; then a cancel the code has not seen.
 */
import type { HistoryStepRow, PendingSignal } from '../contract.js';
import type { ReplayState } from '../replay-state.js';
import { deliverCancel } from './cancel.js';
import { deliver, outcomeOf } from './outcomes.js';
import { handSignal, waitFor } from './signals.js';

/** What a turn may hand the code, in the order it happened: a step's outcome, or a pending signal. */
type Fresh =
  | { readonly step: HistoryStepRow; readonly at: number }
  | { readonly signal: PendingSignal; readonly at: number };

/**
 * Outcomes and pending signals together, in the order they happened (ties: by position, then by signal id): a
 * signal that came before a wait's timeout is taken by the wait, one that came after it is left for a later wait.
 */
function freshInOrder(state: ReplayState, steps: readonly HistoryStepRow[]): Fresh[] {
  const nowMs = state.current.nowMs;
  return [
    ...steps
      .filter((h) => h.delivered_seq === null && h.kind !== 'value' && outcomeOf(h, nowMs))
      .map((step) => ({ step, at: step.finished_ms ?? step.due_ms ?? 0 })),
    ...(state.current.signals ?? []).map((signal) => ({ signal, at: signal.received_ms })),
  ].sort(
    (a, b) =>
      a.at - b.at ||
      ('step' in a ? a.step.seq : Number.MAX_SAFE_INTEGER) -
        ('step' in b ? b.step.seq : Number.MAX_SAFE_INTEGER) ||
      ('signal' in a ? Number(a.signal.id) : 0) - ('signal' in b ? Number(b.signal.id) : 0),
  );
}

/**
 * Hand the code the outcomes no turn delivered yet, in the order they happened, one at a time, draining the
 * code in between; then, blocked, deliver a cancel request it has not seen to the steps this turn scheduled
 * ({@link deliverCancel}). A pending signal whose payload the wait refuses is recorded rejected, not delivered.
 */
export async function deliverFresh(state: ReplayState, steps: readonly HistoryStepRow[]): Promise<void> {
  // Signal waits whose outcome is recorded already (ended, or undelivered after a retry): no signal goes to them.
  const ended = new Set(
    steps.filter((h) => h.kind === 'signal' && h.status !== 'scheduled').map((h) => h.seq),
  );
  const remaining = freshInOrder(state, steps);
  while (state.running()) {
    const index = remaining.findIndex((f) =>
      'step' in f ? state.requested.has(f.step.seq) : waitFor(state, f.signal.name, ended) !== undefined,
    );
    if (index < 0) {
      if (await deliverCancel(state)) continue;
      break;
    }
    const [f] = remaining.splice(index, 1) as [Fresh];
    if ('signal' in f) {
      const seq = waitFor(state, f.signal.name, ended) as number;
      const refused = state.requested.get(seq)?.refuses?.(f.signal);
      if (refused !== undefined) {
        // Not delivered: nothing reached the code, so nothing to drain; the wait takes the next one, if any.
        state.rejectedSignals.push({ signalId: f.signal.id, seq, message: refused });
        continue;
      }
      handSignal(state, f.signal, seq);
    } else {
      const h = f.step;
      // A wait that took a signal earlier in this turn: its timeout no longer counts.
      if (state.requested.get(h.seq)?.settled) continue;
      state.seenDeliveredSeq = state.nextDeliveredSeq;
      deliver(state, h);
      state.deliveries.push({
        stepId: h.id,
        seq: h.seq,
        deliveredSeq: state.nextDeliveredSeq++,
        firesTimer: (h.kind === 'timer' || h.kind === 'signal') && h.status === 'scheduled',
      });
    }
    await state.drain();
  }
}
