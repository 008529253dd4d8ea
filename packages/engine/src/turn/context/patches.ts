/** `ctx.patched(changeId)` and `ctx.deprecatePatch(changeId)`: versioning of workflow code over recorded runs. */
import { InvalidOptionsError } from '@palisade/sdk';
import type { ReplayState } from '../replay-state.js';

/**
 * `ctx.patched` / `ctx.deprecatePatch`: a patch is a recorded value `patch:<id>` at the position where the code
 * asks. A recorded step there that is not that marker is history the old code made: the old branch, and no
 * position is taken. Nothing recorded there: the code runs past its history, so the new branch; `patched`
 * records the marker, `deprecatePatch` nothing. A change id that is not 1–128 of `[A-Za-z0-9_.:-]` throws
 * {@link InvalidOptionsError} at the call.
 * @returns whether the code takes the new branch.
 */
export function patch(state: ReplayState, changeId: string, call: 'patched' | 'deprecatePatch'): boolean {
  if (typeof changeId !== 'string' || !/^[A-Za-z0-9_.:-]{1,128}$/.test(changeId)) {
    throw new InvalidOptionsError(`ctx.${call} in workflow ${state.workflowName}`, [
      { path: 'changeId', message: 'must be 1–128 characters of letters, digits, and _ . : -' },
    ]);
  }
  if (state.refusesCall()) return true;
  const name = `patch:${changeId}`;
  const recorded = state.known.get(state.position);
  if (recorded) {
    if (recorded.kind !== 'value' || recorded.name !== name) return false;
    state.position++;
    return true;
  }
  if (call === 'deprecatePatch') return true;
  const seq = state.position++;
  state.newSteps.push({ seq, kind: 'value', name, output: true, afterDeliveredSeq: state.seenDeliveredSeq });
  return true;
}
