/** `ctx.setProgress(value)`: the run's progress, stored by the turn's commit (not a step). */
import { PAYLOAD_LIMITS } from '@palisade/sdk';
import { checkPayload } from '@palisade/sdk/internal';
import type { ReplayState } from '../replay-state.js';

/**
 * `ctx.setProgress`: this turn's progress becomes a copy of `value` (the last call of the turn wins; a turn that
 * fails the run stores none). A value that is not storable JSON or is over `PAYLOAD_LIMITS.progressBytes` throws
 * at the call. Ignored outside a turn or after the run failed.
 */
export function setProgress(state: ReplayState, value: unknown): void {
  if (state.refusesCall()) return;
  const what = `progress of workflow ${state.workflowName}`;
  state.progress = {
    value: JSON.parse(
      checkPayload(value, what, PAYLOAD_LIMITS.progressBytes, { runId: state.runId }),
    ) as unknown,
  };
}
