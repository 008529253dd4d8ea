import { z } from 'zod';
import type { ActivityDefinition } from './activity.js';
import type { Duration } from './duration.js';
import type { ConcurrencyLimit, RateLimit } from './flow-control.js';
import { echoed } from './errors.js';
import { parseOptions } from './validate.js';
import type { RetryPolicy } from './retry-policy.js';
import type { SignalDefinition, SignalWait } from './signal.js';

/** What a workflow turn knows about its run (`ctx.info`). */
export interface WorkflowInfo {
  readonly runId: string;
  readonly workflowName: string;
  /** Claims of this run's turns so far, this one included. */
  readonly turnAttempt: number;
  readonly queue: string;
}

/** Options of `ctx.waitForSignal(signal, options)`. */
export interface WaitForSignalOptions {
  /**
   * Stop waiting after this long (a duration, fixed by the database clock when the wait starts; at most 10
   * years): the wait then resolves with `{ timedOut: true }`. Without it the wait lasts until a signal comes or
   * the run is cancelled.
   */
  readonly timeoutMs: Duration;
}

/** Per-call overrides of `ctx.run(activity, input, options)`. */
export interface RunActivityOptions {
  readonly retry?: RetryPolicy;
  readonly startToCloseTimeoutMs?: Duration;
  readonly leaseMs?: Duration;
  /** @defaultValue the activity's queue */
  readonly queue?: string;
  /** Higher runs first. @defaultValue the run's priority */
  readonly priority?: number;
  /** At most `limit` attempts of this activity with `key` running at once (see ConcurrencyLimit). @defaultValue none */
  readonly concurrency?: ConcurrencyLimit;
  /** A rate limit for this call, replacing the activity's own (see RateLimit). @defaultValue the activity's */
  readonly rateLimit?: RateLimit;
}

/** Options of `ctx.runChild(workflow, input, options)`. */
export interface RunChildOptions {
  /**
   * The child run's idempotency key (as `client.start`'s `key`): when a run of that workflow with that key exists
   * already, the call fails with a ChildWorkflowFailure naming it, instead of starting a second run.
   * @defaultValue none
   */
  readonly key?: string;
  /** Queue the child's turns are claimed from. @defaultValue the child workflow's queue */
  readonly queue?: string;
  /**
   * What the parent's end or cancel does to a child still running: `'cascade'` cancels it (a cancel of the parent
   * cancels its children in the same transaction), `'abandon'` lets it run on. @defaultValue `'cascade'`
   */
  readonly cancellation?: 'cascade' | 'abandon';
}

/**
 * The context passed to a workflow's `run(input, ctx)`. Workflow code is replayed from the top on every turn
 * over the recorded results, so it must be deterministic: it may await only the promises these methods
 * return (alone or combined with `Promise.all`, `allSettled`, `race`, `any`), and must take ids from
 * `ctx.uuid()`. Awaiting anything else (timers, I/O) is detected and fails the run with an error naming the
 * workflow. `Date.now()`, `new Date()` and `Math.random()` in workflow code are deterministic, as in Temporal: the
 * clock is the run's start, then the recorded time of the last outcome the code was handed (it does not move while
 * the code runs), and `Math.random()` draws from a generator seeded with the run id, so every replay reads the same
 * values; `ctx.now()` and `ctx.random()` record theirs in the history. Legal only inside workflow code.
 */
export interface WorkflowContext {
  readonly info: WorkflowInfo;
  /**
   * Schedule an activity as a durable step and resolve with its output. On replay a completed step resolves
   * with its stored output and is never executed again.
   * @throws ActivityFailure (at the await) when the step failed for good; CancelledFailure when it was cancelled.
   * @throws ValidationError / PalisadeError `PAYLOAD_TOO_LARGE` / InvalidOptionsError (at the call) when the input
   * fails its schema or cannot be stored, or an option is bad.
   */
  run<I extends z.ZodType, O extends z.ZodType>(
    activity: ActivityDefinition<I, O>,
    input: z.input<I>,
    options?: RunActivityOptions,
  ): Promise<z.output<O>>;
  /**
   * Durable sleep: holds no lease while waiting; the due time is fixed (by the database clock) when it starts.
   * At most 10 years.
   * @throws InvalidOptionsError (at the call) when `duration` is not a duration or out of range.
   */
  sleep(duration: Duration): Promise<void>;
  /**
   * Durable sleep until `date` (compared with the database clock).
   * @throws InvalidOptionsError (at the call) when `date` is not a valid `Date`.
   */
  sleepUntil(date: Date): Promise<void>;
  /**
   * Wait for the next signal of this kind sent to the run, a durable step: resolves with its payload (the oldest
   * one not yet taken by another wait, in the order the run received them). A signal sent before the wait is kept
   * and taken at once. Holds no lease while waiting; a signal wakes the run at once. On replay the wait resolves
   * with the payload it took the first time. With `{ timeoutMs }` it resolves with a {@link SignalWait}:
   * `{ timedOut: false, payload }` or, when the timeout passed first, `{ timedOut: true }`.
   * @throws CancelledFailure (at the await) when the run is cancelled while it waits.
   * @throws InvalidOptionsError (at the call) when `signal` is not from defineSignal() or `timeoutMs` is not a
   * duration in range.
   */
  waitForSignal<P extends z.ZodType>(signal: SignalDefinition<P>): Promise<z.output<P>>;
  waitForSignal<P extends z.ZodType>(
    signal: SignalDefinition<P>,
    options: WaitForSignalOptions,
  ): Promise<SignalWait<z.output<P>>>;
  /**
   * Start workflow `workflow` as a child run, a durable step, and resolve with its output. The child is a run of
   * its own (its parent recorded: `describe()`, `palisade runs show`), started in the same commit as the turn that
   * calls this, so it is started exactly once across replays and crashes; its end completes this step and wakes
   * this run. A cancel of this run cancels the child unless `cancellation: 'abandon'`.
   * @throws ChildWorkflowFailure (at the await) when the child failed or was cancelled on its own (its `failure`
   * is the child's), or its key names an existing run; CancelledFailure when this run's cancel ended the step.
   * @throws ValidationError / PalisadeError `PAYLOAD_TOO_LARGE` / InvalidOptionsError (at the call) when the input
   * fails the child's schema or cannot be stored, or an option is bad.
   */
  runChild<I extends z.ZodType, O extends z.ZodType>(
    workflow: WorkflowDefinition<I, O>,
    input: z.input<I>,
    options?: RunChildOptions,
  ): Promise<z.output<O>>;
  /**
   * Whether this run takes the new branch of a code change `changeId` (Temporal's `patched`): true for a run that
   * reaches this point with new code (the answer is recorded as a step), false for a run whose history was
   * recorded by the old code before the change — it replays the old branch. Put the new code under
   * `if (ctx.patched('id'))` and keep the old code in the `else` until no run recorded before the change is left,
   * then use {@link deprecatePatch}. Without it a changed sequence of calls fails with NON_DETERMINISM.
   * @throws InvalidOptionsError (at the call) when `changeId` is not 1–128 letters, digits and `_ . : -`.
   */
  patched(changeId: string): boolean;
  /**
   * Retire patch `changeId` once the old branch is gone from the code: a run that recorded the patch takes its
   * record here, one that did not records nothing. Call it where `patched(changeId)` was.
   * @throws InvalidOptionsError (at the call) as {@link patched}.
   */
  deprecatePatch(changeId: string): void;
  /**
   * Set the run's progress, for a UI or an agent's front end: `handle.describe().run.progress` and `palisade runs
   * show` read the last value set, recorded with the turn's commit (so a turn that fails records nothing). Any JSON
   * value of at most `PAYLOAD_LIMITS.progressBytes` (64 KiB); replay sets the same values again, harmlessly.
   * @throws ValidationError (at the call) naming the path of a value that is not JSON; PalisadeError
   * `PAYLOAD_TOO_LARGE` over the limit.
   */
  setProgress(value: unknown): void;
  /** The current time, recorded on first execution so replay sees the same value. */
  now(): Date;
  /** A random number in [0, 1), recorded so replay sees the same value. */
  random(): number;
  /** A random UUID, recorded so replay sees the same value. */
  uuid(): string;
}

/** Options of {@link defineWorkflow}. */
export interface WorkflowOptions<I extends z.ZodType, O extends z.ZodType> {
  readonly name: string;
  readonly input: I;
  readonly output: O;
  /** Queue its turns are claimed from unless the caller says otherwise. @defaultValue `'default'` */
  readonly queue?: string;
  run(input: z.output<I>, ctx: WorkflowContext): Promise<z.input<O>>;
}

/** A workflow as returned by {@link defineWorkflow}. */
export interface WorkflowDefinition<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  readonly kind: 'workflow';
  readonly name: string;
  readonly input: I;
  readonly output: O;
  readonly queue: string;
  run(input: z.output<I>, ctx: WorkflowContext): Promise<z.input<O>>;
}

const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

const workflowOptionsSchema = z
  .object({
    name: z.string().regex(NAME, 'must be 1–128 characters of letters, digits, and _ . : -'),
    input: z.instanceof(z.ZodType, { message: 'must be a zod schema' }),
    output: z.instanceof(z.ZodType, { message: 'must be a zod schema' }),
    queue: z.string().regex(NAME, 'must be 1–128 characters of letters, digits, and _ . : -').optional(),
    run: z.custom<(...args: unknown[]) => unknown>((v) => typeof v === 'function', {
      message: 'must be a function',
    }),
  })
  .strict();

/**
 * Define a workflow: deterministic orchestration code over durable steps, with zod-checked input and output.
 * @throws InvalidOptionsError naming each bad option.
 */
export function defineWorkflow<I extends z.ZodType, O extends z.ZodType>(
  options: WorkflowOptions<I, O>,
): WorkflowDefinition<I, O> {
  parseOptions(workflowOptionsSchema, options, `workflow ${echoed(options.name)}`);
  return Object.freeze({
    kind: 'workflow' as const,
    name: options.name,
    input: options.input,
    output: options.output,
    queue: options.queue ?? 'default',
    run: (input: z.output<I>, ctx: WorkflowContext) => options.run(input, ctx),
  });
}
