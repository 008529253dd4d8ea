/**
 * The turn's contract: what a turn reads (a run's recorded steps, its pending signals, the claim's parameters) and
 * what it hands to its commit (new steps, deliveries, rejected signals, the outcome). `queries/` reads these types
 * to load a turn and to write its result; nothing here does I/O.
 */
import type { SerializedFailure, WorkflowDefinition, WorkflowInfo } from '@palisade/sdk';
import type { ResolvedRateLimit, ResolvedRetryPolicy } from '@palisade/sdk/internal';
import type { TurnHost } from './host.js';
import type { StepKind, StepStatus } from './state-machine.js';

/** One recorded step of a run, as replay reads it (`loadRunHistory`, `RunHistoryNews.fresh`). */
export interface HistoryStepRow {
  id: string;
  seq: number;
  kind: StepKind;
  name: string;
  status: StepStatus;
  output: unknown;
  error: unknown;
  delivered_seq: number | null;
  /** Epoch ms (DB clock) when a timer is due, or a signal wait times out. */
  due_ms: number | null;
  finished_ms: number | null;
}

/** A signal sent to a run that no wait has taken yet, as a turn sees it. */
export interface PendingSignal {
  id: string;
  name: string;
  payload: unknown;
  /** When the run received it: epoch ms, database clock. */
  received_ms: number;
}

/** A durable call that has no recorded step yet. Durations in ms; due times are fixed by the DB clock at commit. */
export type StepCall =
  | {
      readonly seq: number;
      readonly kind: 'activity';
      readonly name: string;
      readonly input: unknown;
      readonly queue: string;
      readonly priority: number;
      readonly retryPolicy: ResolvedRetryPolicy;
      readonly leaseMs: number;
      readonly startToCloseTimeoutMs: number;
      readonly concurrency?: { readonly key: string; readonly limit: number } | undefined;
      readonly rateLimit?: ResolvedRateLimit | undefined;
      /** Recorded already cancelled, its rejection delivered at `deliveredSeq` (a cancel the code had not seen). */
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | {
      readonly seq: number;
      readonly kind: 'timer';
      readonly name: string;
      readonly delayMs?: number;
      readonly dueAtMs?: number;
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | {
      readonly seq: number;
      readonly kind: 'signal';
      /** The signal's name. */
      readonly name: string;
      /** The wait's timeout, if any: it times out `timeoutMs` after it starts, by the DB clock. */
      readonly timeoutMs?: number;
      /** The pending signal this turn handed to the wait as soon as it was made (it arrived before the wait). */
      readonly signalId?: string;
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | {
      readonly seq: number;
      readonly kind: 'child';
      /** The child's workflow name. */
      readonly name: string;
      /** The child run's id, chosen here so that the step records it; the commit creates the run with it. */
      readonly childRunId: string;
      readonly input: unknown;
      readonly key: string | null;
      readonly queue: string;
      readonly priority: number;
      readonly cancellation: 'cascade' | 'abandon';
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | { readonly seq: number; readonly kind: 'value'; readonly name: string; readonly output: unknown };

/**
 * A step a turn adds to its run: the call, and `afterDeliveredSeq`, the highest delivery order the code had
 * seen when it made the call (0: none yet), so a retry can tell the steps that depended on a withdrawn outcome.
 */
export type NewStep = StepCall & { readonly afterDeliveredSeq: number };

/** A recorded outcome this turn handed to the workflow code for the first time, in order. */
export interface Delivery {
  /** The step's id, or null for the live step at position `seq` (a wait recorded by a turn of a kept instance). */
  readonly stepId: string | null;
  readonly seq: number;
  readonly deliveredSeq: number;
  /**
   * A timer this turn saw fire, or a signal wait it saw time out (due by the claim's DB time): the commit marks it
   * completed.
   */
  readonly firesTimer: boolean;
  /** A pending signal this turn handed to the signal wait at `seq`: the commit records the wait completed with it. */
  readonly signalId?: string;
}

/** How a turn ended: blocked on pending steps, or the run's end (its output, or its failure or cancellation). */
export type TurnOutcome =
  | { readonly kind: 'blocked' }
  | { readonly kind: 'completed'; readonly output: unknown }
  | { readonly kind: 'failed'; readonly error: SerializedFailure }
  | { readonly kind: 'cancelled'; readonly error: SerializedFailure };

/** What a turn hands to its commit: the steps it adds, the outcomes it delivered, how it ended. */
export interface TurnResult {
  readonly newSteps: readonly NewStep[];
  readonly deliveries: readonly Delivery[];
  readonly outcome: TurnOutcome;
  /** The last `ctx.setProgress` value of this turn's run of the code (replay included), if it set one. */
  readonly progress?: { readonly value: unknown };
  /**
   * Pending signals this turn refused at the wait they reached: their payload failed that wait's schema. The commit
   * records each undelivered (`signals.undelivered`), and the wait goes on waiting for a payload it can take.
   */
  readonly rejectedSignals?: readonly RejectedSignal[];
}

/** A pending signal a wait refused: its payload failed the schema of the wait at `seq` (`message` says how). */
export interface RejectedSignal {
  readonly signalId: string;
  readonly seq: number;
  readonly message: string;
}

/** What one turn runs with, besides the history: from the turn's claim. */
export interface TurnParams {
  readonly info: WorkflowInfo;
  /** The run's priority: the default of the activities it schedules. */
  readonly priority: number;
  /**
   * The claim's DB time (epoch ms): timers due by then fire in this turn; `ctx.now()` records it. The outcomes this
   * turn gives steps (a timer fired, a signal taken, a step cancelled) are recorded as finished at its whole ms
   * (`Math.floor(nowMs)`), the workflow's clock after them (`workflowClockAfter`, workflow-clock.ts): the commit
   * writes that.
   */
  readonly nowMs: number;
  /**
   * The run's start (`runs.started_at`, epoch ms; set by its first turn grant and never changed): the workflow's
   * clock before any outcome reached its code. Default: `nowMs` (a run's first turn, in unit tests).
   */
  readonly startedMs?: number;
  readonly cancelRequested: boolean;
  /**
   * The run's pending signals in arrival order (`ClaimedTurnRow.signals`): the turn hands them to the code's waits.
   * None for a fused step's turn, which sees only its completion (its commit keeps the run due when a pending
   * signal matches a wait).
   */
  readonly signals?: readonly PendingSignal[];
}

/** A turn that replays the workflow code from the top. */
export interface TurnInput extends TurnParams {
  /**
   * What the turn needs of the process it runs in (non-durable tracking, microtask drains, fresh random values): the
   * worker passes its Node host (`worker/non-durable-await.ts`). A continued turn runs on its first turn's host.
   */
  readonly host: TurnHost;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflow: WorkflowDefinition<any, any>;
  readonly input: unknown;
  /** The run's live (not retired) steps, in position order (`loadRunHistory`). */
  readonly history: readonly HistoryStepRow[];
}

/** A turn that continues a kept {@link WorkflowInstance}. */
export interface ContinuedTurnInput extends TurnParams {
  /**
   * The run's live steps whose outcome no turn has delivered yet (`RunHistoryNews.fresh`); steps without an
   * outcome (and recorded values) may be included: they are skipped, as a full replay skips them.
   */
  readonly fresh: readonly HistoryStepRow[];
}

/**
 * The workflow code of one run, parked on the durable calls it awaits when its last turn blocked, kept by the
 * worker that ran that turn so that the next turn hands it only what is new ({@link WorkflowInstance.continueTurn})
 * instead of replaying from the top. A continued turn produces exactly the {@link TurnResult} a full replay over
 * the same history would (same positions, delivery order, new steps); the caller must make sure the history is
 * the one this instance left behind plus new outcomes (see {@link WorkflowInstance.expected}), else replay in full.
 * Dropping an instance needs no clean-up: its code waits on promises only it could settle, and it holds no timer,
 * listener or tracking between turns.
 */
export interface WorkflowInstance {
  /**
   * What the run's history holds if nothing but this instance's own committed turns and new outcomes of its steps
   * changed it: the number of live steps and the highest `delivered_seq`.
   */
  readonly expected: { readonly liveSteps: number; readonly maxDeliveredSeq: number };
  /**
   * Whether a later turn may continue this instance: its last turn blocked, and its code has not run outside a
   * turn (a promise that is not a durable call settled between turns: a full replay would not see that).
   */
  readonly continuable: boolean;
  /** Whether the code awaits the outcome of the step at position `seq` (an activity or timer it called, unsettled). */
  awaits(seq: number): boolean;
  /**
   * Run the next turn from where the last one blocked: deliver `turn.fresh` (the same order and cancel rules as a
   * full replay), then schedule, block or end as `runTurn` (run-turn.ts) does. One turn at a time; legal only after the
   * previous turn's result was committed.
   * @returns the turn's result, or undefined (nothing run) when the instance is not {@link continuable}.
   */
  continueTurn(turn: ContinuedTurnInput): Promise<TurnResult | undefined>;
}
