import type { EndedRun } from '../../db/notification-hub.js';
import type { Delivery, NewStep, RejectedSignal, TurnOutcome } from '../../turn/contract.js';
import type { ClaimedStepRow } from '../claim-steps.js';

export interface TurnRef {
  readonly runId: string;
  readonly workflowName: string;
  readonly token: bigint;
  readonly nonce: string;
  readonly attempt: number;
  /** `runs.wake_count` when the turn was claimed. */
  readonly wakeCount: number;
  /** Whether the run had a cancel request when the turn was claimed. */
  readonly cancelRequested: boolean;
  /** The turn's lease (ms), as claimed. */
  readonly leaseMs: number;
  /**
   * The claim's database time (epoch ms, `TurnParams.nowMs`): the outcomes the turn gives steps (timers fired,
   * signals taken, steps recorded cancelled) are recorded as finished at its whole ms.
   */
  readonly nowMs: number;
}

/**
 * What lets a turn's commit grant the activities it schedules to the committing worker (eager dispatch): the
 * worker's id, the activities and queues it serves, and how many attempts it can start now (0: none).
 */
export interface EagerDispatch {
  readonly workerId: string;
  readonly activityNames: readonly string[];
  readonly queues: readonly string[];
  readonly limit: number;
}

export const NO_EAGER_DISPATCH: EagerDispatch = { workerId: '', activityNames: [], queues: [], limit: 0 };

/**
 * What a committed turn hands back: the activity steps it granted to the committing worker, to start now, and,
 * when it ended the run, the run's end as stored.
 */
export interface CommittedTurn {
  readonly eagerSteps: readonly ClaimedStepRow[];
  readonly ended?: EndedRun;
}

/**
 * A turn this worker runs without a claim, on the workflow instance it kept from the run's previous turn, right after
 * one of the run's activities completed on it, and commits in the same statement as that completion (a fused
 * step: `commitFusedTurn` in commit-turn.ts).
 */
export interface FusedTurnRef {
  readonly runId: string;
  readonly workflowName: string;
  readonly workerId: string;
  /** `runs.turn_epoch`, `turn_attempt` and `wake_count` as the kept instance's last turn left them. */
  readonly turnEpoch: number;
  readonly turnAttempt: number;
  readonly wakeCount: number;
  /**
   * The turn's time (epoch ms) as `ctx.now()` records it: a lower bound of the database clock (the previous turn's
   * database time plus the local monotonic time since); the commit is refused if it is ahead of the database clock.
   */
  readonly nowMs: number;
  /** The completion the turn follows: the attempt (step, token, nonce) and its output. */
  readonly completion: {
    readonly stepId: string;
    readonly token: bigint;
    readonly nonce: string;
    readonly output: unknown;
  };
}

/** What a fused step's statement answers: whether it applied, and what a turn commit hands back when it did. */
export interface CommittedFusedTurn extends CommittedTurn {
  readonly applied: boolean;
  /** The turn's grant as stored (when applied): its epoch, attempt and token. */
  readonly turn?: { readonly epoch: number; readonly attempt: number; readonly token: string };
}

/** What a turn's code decided: the steps it adds, the outcomes it delivered, and how it ended. */
export interface TurnRecord {
  readonly newSteps: readonly NewStep[];
  readonly deliveries: readonly Delivery[];
  readonly outcome: TurnOutcome;
  /** The run's progress as the turn last set it (`ctx.setProgress`), if it set one. */
  readonly progress?: { readonly value: unknown };
  /** Pending signals a wait of the turn refused (payload not fitting its schema): recorded undelivered. */
  readonly rejectedSignals?: readonly RejectedSignal[];
}

/** Who holds the turn the commit fences: a claimed turn (its ref), or a fused step (its completion). */
export type TurnGrant = { kind: 'claimed'; ref: TurnRef } | { kind: 'fused'; fused: FusedTurnRef };
