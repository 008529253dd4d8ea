/** The turn's entry points: run one turn of a workflow over its history, and keep the instance it leaves. */
import type { TurnInput, TurnResult, WorkflowInstance } from './contract.js';
import { Replay } from './replay.js';

/**
 * One turn of a workflow (a replay from the top over the recorded steps), without I/O: the caller loads the
 * history and commits the result. Pure with respect to the database; testable without one.
 *
 * Replay rules:
 * - each durable call takes the next position; a recorded step at that position must have the same kind and
 *   name, or the turn fails the run with `NonDeterminismError` — a recorded result is never handed to a
 *   different step;
 * - recorded outcomes are delivered one at a time, draining the workflow's microtasks in between (without an
 *   event-loop turn unless the code uses `process.nextTick` or `queueMicrotask`: see `TurnHost.settleMicrotasks`),
 *   in the order earlier turns delivered them (`delivered_seq`), then new outcomes in the order they happened; so
 *   `Promise.race` and friends see the same winner on every replay;
 * - a call with no recorded step schedules a new one; the turn ends when the code blocks on pending steps;
 * - a cancel request the code has not seen through a cancelled step reaches it at the steps it is blocked on
 *   that this turn scheduled: they are recorded cancelled and their awaits reject with CancelledFailure.
 */
export async function runTurn(turn: TurnInput): Promise<TurnResult> {
  return (await startTurn(turn)).result;
}

/**
 * {@link runTurn}, and the workflow instance it leaves behind: when the turn blocked, its code is parked on the
 * durable calls it awaits, and a later turn of the same run may continue it ({@link WorkflowInstance}).
 */
export async function startTurn(
  turn: TurnInput,
): Promise<{ result: TurnResult; instance: WorkflowInstance }> {
  const instance = new Replay(turn.workflow, turn.info.runId, turn.history, turn.host);
  const result = await instance.firstTurn(turn);
  return { result, instance };
}
