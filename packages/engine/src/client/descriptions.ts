/**
 * The public shapes of runs, steps, attempts, events, signals and child runs, as the client returns them
 * (`handle.describe()`, `client.list()`, `schedules.describe()`, `handle.watch()`): camelCase fields, `Date`s for
 * times (by the database clock, millisecond precision), status unions. They are mapped from the database rows in
 * one place, `describe-run.ts` (graphile-worker's `DbJob` vs `Job`).
 * @module
 */
import type { UnclaimedWork } from '../queries/unclaimed-work.js';
import type * as machine from '../turn/state-machine.js';

// The status unions are the state machine's (turn/state-machine.ts holds the canonical lists and transitions).

/**
 * The status of a run. `pending`: no turn (or, for an activity run, no attempt) has begun yet, or a delayed start
 * is not due; `running`: begun and not ended; `completed`, `failed`, `cancelled`: ended, for good (a `failed` or
 * `cancelled` run can be retried with `client.retry`, which makes it `pending` again).
 */
export type RunStatus = machine.RunStatus;

/** The statuses a run ends in. */
export type RunEndStatus = machine.TerminalRunStatus;

/**
 * The status of a step (DESIGN §4): `scheduled` (waiting to be claimed, or for its timer, signal or child),
 * `running` (an attempt holds its lease), or ended: `completed`, `failed`, `cancelled`.
 */
export type StepStatus = machine.StepStatus;

/**
 * What a step is: an activity call, a durable timer (`ctx.sleep`), a signal wait, a child run, or a recorded value
 * (`ctx.now()`, `ctx.random()`, `ctx.uuid()` as the first turn that asked saw it).
 */
export type StepKind = machine.StepKind;

/**
 * How an attempt ended: `completed`, `failed` (its code threw), `lease_expired` (seen by the next claim or a
 * sweep), `timed_out` (its start-to-close deadline passed), `rejected_stale` (a write of a superseded holder was
 * refused), `cancelled` (the run or step was cancelled), `released` (given back unstarted or on shutdown, not
 * charged to the retry budget).
 */
export type AttemptOutcome = machine.AttemptOutcome;

/** A per-key concurrency limit as stored: at most `limit` runs (or steps) with `key` running at once. */
export interface ConcurrencyDescription {
  readonly key: string;
  readonly limit: number;
}

/** A per-key rate limit as stored: at most `limit` starts with `key` per `periodMs` milliseconds. */
export interface RateLimitDescription {
  readonly key: string;
  readonly limit: number;
  readonly periodMs: number;
}

/** One run: a workflow run, or the envelope of a standalone activity run (`client.enqueue`). */
export interface RunDescription {
  /** The run id (a UUID). */
  readonly id: string;
  readonly kind: machine.RunKind;
  /** The workflow's or activity's name. */
  readonly name: string;
  /** For an activity run: its step's status mapped to the run's (`scheduled` is `pending`). */
  readonly status: RunStatus;
  /** The input, as stored (after the schema's parsing, through JSON). */
  readonly input: unknown;
  /** The output once `completed`, else null. */
  readonly output: unknown;
  /** The stored failure (a `SerializedFailure`) once `failed`, else null. */
  readonly error: unknown;
  /** A workflow run's last `ctx.setProgress` value, or null. */
  readonly progress: unknown;
  /** The run that started this one with `ctx.runChild`, or null. */
  readonly parentRunId: string | null;
  /** The schedule whose tick (or trigger, or backfill) created this run, or null. */
  readonly scheduleId: string | null;
  /** The tick of `scheduleId` this run is for, or null. */
  readonly scheduleTickAt: Date | null;
  /** A workflow run's per-key concurrency (`start`'s `concurrency`), or null (a job's is on its step). */
  readonly concurrency: ConcurrencyDescription | null;
  /** The idempotency key it was started with, or null. */
  readonly idempotencyKey: string | null;
  readonly queue: string;
  /** Higher runs first. */
  readonly priority: number;
  /** The reason of the first cancel request, or null when none was made. */
  readonly cancelReason: string | null;
  readonly createdAt: Date;
  /**
   * When a run whose start was delayed (`startAt`, `delay`) becomes due, while it is `pending` and that time is
   * still ahead; null otherwise.
   */
  readonly startAt: Date | null;
  /** When its first turn (or attempt) was claimed, or null. */
  readonly startedAt: Date | null;
  /** When it ended, or null. */
  readonly finishedAt: Date | null;
}

/** One attempt: one claim of a step, or of a workflow turn, by one worker. */
export interface AttemptDescription {
  /** The step claimed, or null for a workflow turn's attempt. */
  readonly stepId: string | null;
  readonly kind: 'activity' | 'turn';
  /** The claims of its step charged to the retry budget, 1-based. */
  readonly attempt: number;
  /** The claims of its step, 1-based; never decreases. */
  readonly epoch: number;
  /** The fencing token of the claim: a 64-bit integer as a decimal string. */
  readonly token: string;
  /** The worker that claimed it (`host:pid:random`). */
  readonly workerId: string;
  readonly claimedAt: Date;
  /** When it ended, or null while it runs. */
  readonly endedAt: Date | null;
  /** How it ended, or null while it runs. */
  readonly outcome: AttemptOutcome | null;
  /** `endedAt - claimedAt` in milliseconds, or null while it runs. */
  readonly durationMs: number | null;
}

/** One step of a run: one durable call its workflow made (for an activity run: its one step). */
export interface StepDescription {
  readonly id: string;
  /** Its position in the run's history, from 0. */
  readonly seq: number;
  readonly kind: StepKind;
  /** The activity, timer, signal or child workflow name. */
  readonly name: string;
  readonly status: StepStatus;
  /** The claims charged to the retry budget so far (0 before the first). */
  readonly attempt: number;
  /** The claims so far (0 before the first); never decreases. */
  readonly epoch: number;
  /** The fencing token of the latest claim (a decimal string), or null before the first. */
  readonly token: string | null;
  /** Its output once `completed`, else null. */
  readonly output: unknown;
  /** The stored failure of its last failed attempt, or null. */
  readonly error: unknown;
  /** When it is next due (a retry's backoff, a timer), or null; null while it runs (see `leaseExpiresAt`). */
  readonly nextRunAt: Date | null;
  /** When the current holder's lease expires, by the database clock, or null. */
  readonly leaseExpiresAt: Date | null;
  /** The last `ctx.heartbeat(details)` of its attempts, or null. */
  readonly heartbeatDetails: unknown;
  /** When `client.retry` withdrew it from the replayed history (the row is kept), or null. */
  readonly retiredAt: Date | null;
  /** Its per-key concurrency (`concurrency` of `enqueue` / `ctx.run`), or null. */
  readonly concurrency: ConcurrencyDescription | null;
  /** Its per-key rate limit, or null. */
  readonly rateLimit: RateLimitDescription | null;
  /** Its attempts, oldest first. */
  readonly attempts: readonly AttemptDescription[];
}

/** One event of a run's append-only history (`attempt:claimed`, `attempt:stale-rejected`, `run:completed`, …). */
export interface EventDescription {
  /**
   * The event's id, unique within the run: a decimal string for a stored event; for one read off a row, the kind
   * and the row (`started:<run id>`, `scheduled:<step id>`, `claim:<n>`, `completed:<step id>`, `end:<run id>`).
   */
  readonly id: string;
  /** The step it is about, or null for the run's own events (`run:*`) and its turns'. */
  readonly stepId: string | null;
  /** Colon-namespaced: `attempt:claimed`, `attempt:stale-rejected`, `step:completed`, `run:progress`, … */
  readonly type: string;
  readonly attempt: number | null;
  readonly epoch: number | null;
  /** The fencing token concerned (a decimal string), or null. */
  readonly token: string | null;
  readonly workerId: string | null;
  /** What else the event records (a failure, a reason, the tokens of a stale rejection…), or null. */
  readonly data: unknown;
  readonly at: Date;
}

/** Why no wait will take a signal ({@link SignalDescription.undelivered}). */
export type UndeliveredSignal =
  | { readonly reason: 'invalid-payload'; readonly seq: number; readonly message: string }
  | { readonly reason: 'run-ended'; readonly status: RunEndStatus };

/** A signal sent to a run. */
export interface SignalDescription {
  /** Its id: its place in the order the run received its signals (a decimal string). */
  readonly id: string;
  readonly name: string;
  readonly payload: unknown;
  readonly receivedAt: Date;
  /** The wait step that took it, or null while it is pending or when no wait will take it. */
  readonly stepId: string | null;
  /** The position of that wait step, or null. */
  readonly stepSeq: number | null;
  /** When a wait took it, or when it became undelivered; null while pending. */
  readonly consumedAt: Date | null;
  /**
   * Why no wait will take it, or null (pending, or taken): `invalid-payload` — the wait at `seq` refused its
   * payload (`message` quotes the schema) and went on waiting; `run-ended` — the run ended (`status`) first.
   */
  readonly undelivered: UndeliveredSignal | null;
}

/** A run started by another with `ctx.runChild`. */
export interface ChildRunDescription {
  readonly id: string;
  readonly name: string;
  readonly status: RunStatus;
  /** The parent's step that started it (its position in the parent's history), or null. */
  readonly seq: number | null;
  readonly createdAt: Date;
  readonly finishedAt: Date | null;
}

/** A run with everything recorded about it, as `handle.describe()` returns it. */
export interface RunDetails {
  readonly run: RunDescription;
  /** The run's steps in position order (retired ones too, with `retiredAt`), each with its attempts. */
  readonly steps: readonly StepDescription[];
  /** The attempts of a workflow run's turns (`kind: 'turn'`, no step), oldest first; empty for activity runs. */
  readonly turns: readonly AttemptDescription[];
  /** Its history, in order. */
  readonly events: readonly EventDescription[];
  /**
   * Signals sent to the run, in arrival order: pending ones (`consumedAt` null), those a wait took (`stepId`), and
   * those no wait will take (`undelivered`: a wait refused the payload, or the run ended first).
   */
  readonly signals: readonly SignalDescription[];
  /** The runs this one started with `ctx.runChild`, oldest first (its parent: `run.parentRunId`). */
  readonly children: readonly ChildRunDescription[];
  /**
   * Work due for at least `UNCLAIMED_AFTER_MS` (or the `unclaimedAfterMs` given) that no worker ever claimed: most
   * likely no live worker serves that activity or workflow on that queue.
   */
  readonly unclaimed: readonly UnclaimedWork[];
}

/** An event as `handle.watch()` yields it. */
export interface WatchedEvent extends EventDescription {
  /** The name of the step the event is about, or null for the run's own events (`run:*`, turn events). */
  readonly stepName: string | null;
  /** Pass as `watch({ after })` to resume right after this event. Opaque. */
  readonly cursor: string;
}
