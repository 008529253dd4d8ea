/**
 * Fault points: places inside the engine where a fault-injection test may pause it, set only through
 * `setFaultHook()` from `@palisade/engine/testing`. With no hook set (always, outside tests), each point costs one
 * property read; nothing else on the hot path depends on a test.
 */
import type { AttemptRef } from '../queries/fenced-outcome.js';

/** What one row of a batched completion statement answered: see {@link FaultHooks}'s `completion:after-commit`. */
export interface CompletionAnswer {
  readonly attempt: AttemptRef;
  /** `rejected`: the row's fence failed and the statement recorded it as a stale write. */
  readonly outcome: 'applied' | 'replayed' | 'rejected';
}

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
  /**
   * In a worker's workflow turn, after the workflow code ran and before the turn's commit is sent (the turn holds
   * its lease). Receives the run id.
   */
  'turn:before-commit'?: (runId: string) => Promise<void>;
  'claim:before-commit'?: (
    claimed: readonly { readonly stepId: string; readonly name: string }[],
  ) => Promise<void>;
  /**
   * In a worker's completion batcher, before a batch's completion statement is sent; receives the batch's attempts
   * (at most one per step, in the statement's order). While the hook runs, every completion of the batch is in
   * flight (its caller waits), and so is every completion queued behind it.
   */
  'completion:before-send'?: (batch: readonly AttemptRef[]) => Promise<void>;
  /**
   * In a worker's completion batcher, after a batch's completion statement returned (it has committed) and before
   * its rows' answers reach their callers; receives each attempt with its row's answer. A hook that throws here
   * fails the whole batch as the statement's own error would (a connection error: a reply lost after the commit).
   */
  'completion:after-commit'?: (answers: readonly CompletionAnswer[]) => Promise<void>;
}

export type FaultPoint = keyof FaultHooks;

/** The hooks in force in this process (empty unless a test set one). */
export const faultHooks: FaultHooks = {};
