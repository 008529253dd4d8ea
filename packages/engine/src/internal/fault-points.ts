/**
 * Fault points: places inside the engine where a fault-injection test may pause it, set only through
 * `setFaultHook()` from `@palisade/engine/testing`. With no hook set (always, outside tests), each point costs one
 * property read; nothing else on the hot path depends on a test.
 */
import type { AttemptRef } from '../queries/fenced-outcome.js';

/** The points a hook can be attached to. */
export interface FaultHooks {
  /**
   * In `ctx.fencedTransaction`, after the fence UPDATE succeeded and before COMMIT is sent: the transaction holds
   * the step's row lock and has written the user's rows (research/fencing-semantics.md §3.3 T12 (b)).
   */
  'fenced-transaction:before-commit'?: (attempt: AttemptRef) => Promise<void>;
  /**
   * In `ctx.fencedTransaction`, after the user's writes and the worker's last local check, before the fence UPDATE
   * is sent: a stall here lets the lease end although the worker saw it alive, so the database's fence (not the
   * worker) must refuse the write.
   */
  'fenced-transaction:before-fence'?: (attempt: AttemptRef) => Promise<void>;
  /**
   * In `client.start` / `client.enqueue` (and per statement of `startMany` / `enqueueMany`), after the insert
   * statement committed and before its reply is used: a hook that throws a connection error here is a reply lost
   * after the commit (the client retries the insert). Receives the run id of the statement's first input.
   */
  'client:after-insert-run'?: (runId: string) => Promise<void>;
  /**
   * In a worker's claim of activity steps, after the claim statement ran and before its COMMIT: the claimed
   * rows are locked and not yet visible to others. With this hook set the claim runs in an explicit
   * transaction (otherwise it is one autocommitted statement). Receives the names of the claimed steps.
   */
  'claim:before-commit'?: (
    claimed: readonly { readonly stepId: string; readonly name: string }[],
  ) => Promise<void>;
}

export type FaultPoint = keyof FaultHooks;

/** The hooks in force in this process (empty unless a test set one). */
export const faultHooks: FaultHooks = {};
