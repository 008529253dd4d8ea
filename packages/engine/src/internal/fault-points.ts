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

/** A workflow turn as a turn fault point shows it. */
export interface TurnFault {
  readonly runId: string;
  readonly workflowName: string;
  /**
   * The turn's token; for a fused turn, which takes its token in its commit, the token of the attempt whose
   * completion the commit records.
   */
  readonly token: bigint;
  readonly turnAttempt: number;
  /**
   * How the worker got the turn: its own claim, a completion statement that claimed it (an eager turn), or none
   * yet: a fused step's turn, run on the kept instance right after one of the run's activities completed here and
   * granted and committed with that completion in one statement (`commitFusedTurn`).
   */
  readonly grant: 'claimed' | 'eager' | 'fused';
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
   * In `client.signalWithStart`, after the start statement ran (the run exists, or was found by its key) and
   * before the signal is stored; receives the run's id. A hook that throws here is a failure between the two.
   */
  'client:signal-with-start:before-signal'?: (runId: string) => Promise<void>;
  /**
   * In a worker's claim of activity steps, after the claim statement ran and before its COMMIT: the claimed
   * rows are locked and not yet visible to others. With this hook set the claim runs in an explicit
   * transaction (otherwise it is one autocommitted statement). Receives the names of the claimed steps.
   */
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
  /**
   * In a worker's turn loop, once a turn was granted to this worker (claimed, or eagerly by a completion statement)
   * and before its workflow code runs: the worker holds the turn's lease and has done nothing with it.
   */
  'turn:before-run'?: (turn: TurnFault) => Promise<void>;
  /**
   * In a worker's turn loop, after the turn's workflow code ran and before its commit is sent (the slots for eager
   * dispatch are not yet set aside): a stall here lets the turn's lease end before the commit, which the fence must
   * then refuse.
   */
  'turn:before-commit'?: (turn: TurnFault) => Promise<void>;
  /**
   * In a worker's turn loop, after a turn's commit returned having granted this worker activity steps (eager
   * dispatch) and before the worker starts them: each granted step's lease runs, and nothing of it has started.
   * Receives the turn and the granted attempts.
   */
  'dispatch:before-start'?: (turn: TurnFault, granted: readonly AttemptRef[]) => Promise<void>;
  /**
   * In a worker's turn loop, after a claimed or eager turn's commit returned and before the worker keeps the run's
   * workflow instance for its next turn (and before it starts granted steps): a stall here is a commit whose reply
   * reaches the worker after the run's next turn was already claimed (a timer due at once, under load).
   */
  'turn:after-commit'?: (turn: TurnFault) => Promise<void>;
  /**
   * In a schedule evaluation, after the due schedules were read (with the version of each) and their ticks
   * decided, before the firing statement is sent: a stall here is an evaluator that wakes with a stale read.
   * Receives the ids of the schedules it is about to fire.
   */
  'schedules:before-fire'?: (scheduleIds: readonly string[]) => Promise<void>;
}

export type FaultPoint = keyof FaultHooks;

/** The hooks in force in this process (empty unless a test set one). */
export const faultHooks: FaultHooks = {};
