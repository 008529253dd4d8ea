/** The workflow's clock: what `Date.now()` reads in workflow code, derived from the history alone. */
import type { HistoryStepRow } from './contract.js';

/**
 * The workflow's clock (whole epoch ms) once `h`'s outcome reached the code, when it was `clockMs` before: the time
 * the outcome was recorded (`finished_ms`: an activity's or child's end, or the turn that fired a timer, handed a
 * signal or recorded a cancel), or, for an outcome this turn gives (not recorded yet), the turn's own time, which
 * its commit records as the step's `finished_at`. Never earlier than before: the clock only advances. Read only
 * from the history, so every replay of the run computes the same clock at every point of its code.
 */
export function workflowClockAfter(
  clockMs: number,
  h: HistoryStepRow | undefined,
  turnNowMs: number,
): number {
  return Math.max(clockMs, Math.floor(h?.finished_ms ?? turnNowMs));
}
