/**
 * Test helpers for activity code, exported as `@palisade/sdk/testing`.
 *
 * {@link MockActivityContext} stands in for the context a worker passes to an activity's `run(input, ctx)`,
 * so an activity can be unit-tested without a database or a worker: set `ctx.info`, record heartbeats,
 * cancel or abort the attempt, and hand `ctx.fencedTransaction` a transaction of your own.
 *
 * ```ts
 * import { createMockActivityContext } from '@palisade/sdk/testing';
 *
 * const ctx = createMockActivityContext({ info: { attempt: 2, heartbeatDetails: { page: 3 } } });
 * const result = await ctx.run(importPages, { url });
 * expect(ctx.heartbeats).toEqual([{ page: 4 }, { page: 5 }]);
 * ```
 *
 * @module
 */
import { z } from 'zod';
import {
  ACTIVITY_DEFAULTS,
  fencingInfo,
  type ActivityContext,
  type ActivityDefinition,
  type ActivityInfo,
  type FencedTransaction,
  type FencingInfo,
} from '../activity.js';
import {
  AttemptAbortedError,
  InvalidOptionsError,
  LeaseLostError,
  type AbortReason,
  type FencedOperation,
  type PalisadeErrorContext,
} from '../errors.js';
import { PAYLOAD_LIMITS, checkPayload } from '../payload.js';
import { parseOptions, validate } from '../validate.js';

/**
 * The `ctx.info` fields a test may set; every field is optional and `fencing` may be given in part.
 * Unset fields take {@link MOCK_ACTIVITY_INFO_DEFAULTS}, or the activity definition's values in
 * {@link MockActivityContext.run}.
 */
export type MockActivityInfo = Partial<Omit<ActivityInfo, 'fencing'>> & {
  readonly fencing?: Partial<Pick<FencingInfo, 'scope' | 'token'>>;
};

/**
 * Defaults of the mock's `ctx.info`. `epoch` defaults to `attempt`, `fencing.scope` to `run:<runId>/seq:<seq>`
 * (the scope a workflow step's attempts get; a standalone activity's is `run:<runId>`);
 * `heartbeatDetails` defaults to `undefined` (no previous attempt heartbeated).
 */
export const MOCK_ACTIVITY_INFO_DEFAULTS = Object.freeze({
  runId: 'mock-run',
  stepId: 'mock-step',
  activityName: 'mock-activity',
  seq: 0,
  attempt: 1,
  fencingToken: 1n,
  queue: ACTIVITY_DEFAULTS.queue,
  workerId: 'mock-worker',
  leaseMs: ACTIVITY_DEFAULTS.leaseMs,
  startToCloseTimeoutMs: ACTIVITY_DEFAULTS.startToCloseTimeoutMs,
});

/** Options of {@link createMockActivityContext}. */
export interface MockActivityContextOptions {
  /** Fields of `ctx.info`; see {@link MOCK_ACTIVITY_INFO_DEFAULTS} for what unset fields become. */
  readonly info?: MockActivityInfo;
  /**
   * The object `ctx.fencedTransaction(fn)` passes to `fn` as `tx`, e.g. a drizzle transaction on a test
   * database or a fake. Without it `ctx.fencedTransaction` rejects with an `InvalidOptionsError`.
   */
  readonly transaction?: FencedTransaction;
  /**
   * Called with the details of each `ctx.heartbeat(details)` before the heartbeat is accepted. It may call
   * {@link MockActivityContext.abort} to make that very heartbeat fail (as a fenced-out heartbeat would), or
   * throw to make `ctx.heartbeat` reject with its error. Awaited if it returns a promise.
   */
  readonly onHeartbeat?: (details: unknown) => void | Promise<void>;
}

const positiveInt = z.number().int('must be a whole number').min(1, 'must be ≥ 1');
const nonEmpty = z.string().min(1, 'must not be empty');

const optionsSchema = z
  .object({
    info: z
      .object({
        runId: nonEmpty.optional(),
        stepId: nonEmpty.optional(),
        activityName: nonEmpty.optional(),
        seq: z.number().int('must be a whole number').min(0, 'must be ≥ 0').optional(),
        attempt: positiveInt.optional(),
        epoch: positiveInt.optional(),
        fencing: z
          .object({
            scope: nonEmpty.optional(),
            token: z.bigint('must be a bigint, e.g. 1n').positive('must be > 0n').optional(),
          })
          .strict()
          .optional(),
        heartbeatDetails: z.unknown().optional(),
        queue: nonEmpty.optional(),
        workerId: nonEmpty.optional(),
        leaseMs: positiveInt.optional(),
        startToCloseTimeoutMs: positiveInt.optional(),
      })
      .strict()
      .superRefine((info, ctx) => {
        // epoch counts every claim, attempt only those charged to the retry budget: epoch ≥ attempt always.
        const attempt = info.attempt ?? MOCK_ACTIVITY_INFO_DEFAULTS.attempt;
        if (info.epoch !== undefined && info.epoch < attempt) {
          ctx.addIssue({
            code: 'custom',
            path: ['epoch'],
            message: `must be ≥ attempt (${attempt}): every attempt is also a claim`,
          });
        }
      })
      .optional(),
    transaction: z.unknown().optional(),
    onHeartbeat: z.custom((v) => typeof v === 'function', 'must be a function').optional(),
  })
  .strict();

const DEFAULT_ABORT_MESSAGES: Readonly<Record<AbortReason, string>> = Object.freeze({
  'lease-lost': 'a newer attempt took over the step (simulated by the test)',
  'lease-expired-locally':
    'the local lease estimate ran out before a heartbeat renewed it (simulated by the test)',
  deadline: 'the start-to-close timeout passed (simulated by the test)',
  cancelled: 'cancelled by the test',
  shutdown: 'the worker is shutting down (simulated by the test)',
});

/**
 * A stand-in for the `ActivityContext` a worker passes to `run(input, ctx)`, for unit-testing activities
 * without a database, in the manner of Temporal's `MockActivityEnvironment`. Create it with
 * {@link createMockActivityContext}.
 *
 * It records each accepted heartbeat in {@link MockActivityContext.heartbeats}. {@link MockActivityContext.abort}
 * (or {@link MockActivityContext.cancel}) fires `ctx.signal` with an `AttemptAbortedError`; from then on the
 * attempt counts as no longer owning its lease, so `heartbeat` and `fencedTransaction` reject: with a
 * `LeaseLostError` after `abort('lease-lost')`, with the signal's `AttemptAbortedError` after any other reason.
 * One context stands for one attempt; create a new one to simulate the next attempt.
 */
export class MockActivityContext implements ActivityContext {
  readonly #given: MockActivityInfo;
  /** Boxed, so "not given" stays distinct from any value the engine's transaction type allows. */
  readonly #transaction: { readonly tx: FencedTransaction } | undefined;
  readonly #onHeartbeat: ((details: unknown) => void | Promise<void>) | undefined;
  readonly #controller = new AbortController();
  readonly #heartbeats: unknown[] = [];
  #info: ActivityInfo;

  /**
   * Prefer {@link createMockActivityContext}; this constructor takes the same options.
   * @throws InvalidOptionsError naming each bad option (e.g. `info.attempt: must be ≥ 1`, unknown keys).
   */
  constructor(options: MockActivityContextOptions = {}) {
    parseOptions(optionsSchema, options, 'mock activity context');
    // A copy, so a test that later mutates its options object does not change this attempt's info.
    const info = options.info ?? {};
    this.#given = info.fencing ? { ...info, fencing: { ...info.fencing } } : { ...info };
    this.#transaction = options.transaction === undefined ? undefined : { tx: options.transaction };
    this.#onHeartbeat = options.onHeartbeat;
    this.#info = resolveInfo(this.#given, undefined);
  }

  /**
   * What the attempt knows about itself. Fields not set in the options take the activity definition's
   * `name`, `leaseMs`, `startToCloseTimeoutMs` and `queue` once {@link MockActivityContext.run} was called,
   * and {@link MOCK_ACTIVITY_INFO_DEFAULTS} otherwise. Frozen.
   */
  get info(): ActivityInfo {
    return this.#info;
  }

  /**
   * Fires when the test calls {@link MockActivityContext.abort} or {@link MockActivityContext.cancel};
   * `signal.reason` is then an `AttemptAbortedError` whose `reason` is the given {@link AbortReason}.
   */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /**
   * The `details` of every accepted `ctx.heartbeat(details)` call, in order (`undefined` for a call without
   * details). Stored as passed, not copied. A heartbeat rejected after an abort is not recorded.
   */
  get heartbeats(): readonly unknown[] {
    return this.#heartbeats;
  }

  /**
   * Record a heartbeat: call `onHeartbeat` (if given), then append `details` to
   * {@link MockActivityContext.heartbeats}. An arrow function, so it still works when destructured from ctx.
   * @throws LeaseLostError after `abort('lease-lost')`, also when `onHeartbeat` aborted during this call.
   * @throws AttemptAbortedError (the signal's reason) after an abort for any other reason, or `cancel()`.
   * @throws ValidationError / PalisadeError `PAYLOAD_TOO_LARGE` for details the engine would refuse.
   */
  readonly heartbeat = async (details?: unknown): Promise<void> => {
    this.#throwIfAborted('heartbeat');
    // As in the engine: details the database could not store are refused by this call.
    if (details !== undefined) {
      checkPayload(details, 'heartbeat details', PAYLOAD_LIMITS.heartbeatDetailsBytes, this.#errorContext());
    }
    if (this.#onHeartbeat) await this.#onHeartbeat(details);
    // onHeartbeat may have aborted the attempt; as with a fenced-out heartbeat, nothing is stored then.
    this.#throwIfAborted('heartbeat');
    this.#heartbeats.push(details);
  };

  /**
   * Call `fn` with the `transaction` given in the options and return its result. As in the engine, the fence
   * is checked last: if the attempt was aborted while `fn` ran, the call rejects instead of returning
   * (the real transaction would have rolled back; a fake `transaction` keeps whatever `fn` did to it).
   * An arrow function, so it still works when destructured from ctx.
   * @throws InvalidOptionsError when no `transaction` was given to {@link createMockActivityContext}.
   * @throws LeaseLostError after `abort('lease-lost')`; AttemptAbortedError after any other abort.
   */
  readonly fencedTransaction = async <T>(fn: (tx: FencedTransaction) => Promise<T>): Promise<T> => {
    this.#throwIfAborted('fenced-transaction');
    if (this.#transaction === undefined) {
      throw new InvalidOptionsError('mock activity context', [
        {
          path: 'transaction',
          message:
            'ctx.fencedTransaction was called but no transaction was given; pass the object your activity ' +
            'expects as tx: createMockActivityContext({ transaction })',
        },
      ]);
    }
    const result = await fn(this.#transaction.tx);
    this.#throwIfAborted('fenced-transaction');
    return result;
  };

  /**
   * Cancel the attempt, as when its run or step is cancelled: the same as `abort('cancelled', message)`.
   * @param message the text of the `AttemptAbortedError`. @defaultValue `'cancelled by the test'`
   */
  cancel(message?: string): void {
    this.abort('cancelled', message);
  }

  /**
   * Fire `ctx.signal` with an `AttemptAbortedError` of the given `reason`. For `'lease-lost'` its `cause` is a
   * `LeaseLostError` saying the step was superseded by token `fencing.token + 1n`. Only the first call has an
   * effect; later calls are ignored, as an attempt is aborted once.
   * @param message the text of the error; a default naming the reason is used when omitted.
   */
  abort(reason: AbortReason, message?: string): void {
    if (this.#controller.signal.aborted) return;
    this.#controller.abort(
      new AttemptAbortedError(reason, message ?? DEFAULT_ABORT_MESSAGES[reason], {
        ...this.#errorContext(),
        cause: reason === 'lease-lost' ? this.#leaseLost('heartbeat') : undefined,
      }),
    );
  }

  /**
   * Run `definition` as one attempt would: validate `input` with its input schema, call its `run` with the
   * parsed input and this context, and validate the result with its output schema. Heartbeats and aborts
   * carry over between calls on the same context. The completion fence is not simulated: a result returned
   * after an abort is still returned (check `ctx.signal.aborted` if that matters to the test).
   * @returns the parsed output.
   * @throws ValidationError naming the activity and field path when the input or the output is invalid.
   * @throws whatever the activity throws, unchanged.
   */
  async run<I extends z.ZodType, O extends z.ZodType>(
    definition: ActivityDefinition<I, O>,
    input: z.input<I>,
  ): Promise<z.output<O>> {
    this.#info = resolveInfo(this.#given, definition);
    const context = this.#errorContext();
    const parsedInput = validate(definition.input, input, `input of activity ${definition.name}`, context);
    const output = await definition.run(parsedInput, this);
    return validate(definition.output, output, `output of activity ${definition.name}`, context);
  }

  #errorContext(): PalisadeErrorContext {
    const { runId, stepId, attempt, fencing } = this.#info;
    return { runId, stepId, attempt, token: fencing.token };
  }

  #leaseLost(operation: FencedOperation): LeaseLostError {
    const { runId, stepId, attempt, activityName, seq, fencing } = this.#info;
    return new LeaseLostError({
      operation,
      stepLabel: `${activityName}#${seq}`,
      runId,
      stepId,
      attempt,
      staleToken: fencing.token,
      currentToken: fencing.token + 1n,
      reason: 'superseded',
    });
  }

  #throwIfAborted(operation: FencedOperation): void {
    const { signal } = this.#controller;
    if (!signal.aborted) return;
    const aborted = signal.reason as AttemptAbortedError;
    throw aborted.reason === 'lease-lost' ? this.#leaseLost(operation) : aborted;
  }
}

function resolveInfo(given: MockActivityInfo, definition: ActivityDefinition | undefined): ActivityInfo {
  const d = MOCK_ACTIVITY_INFO_DEFAULTS;
  const stepId = given.stepId ?? d.stepId;
  const runId = given.runId ?? d.runId;
  const seq = given.seq ?? d.seq;
  const attempt = given.attempt ?? d.attempt;
  return Object.freeze({
    runId,
    stepId,
    activityName: given.activityName ?? definition?.name ?? d.activityName,
    seq,
    attempt,
    epoch: given.epoch ?? attempt,
    fencing: fencingInfo(
      given.fencing?.scope ?? `run:${runId}/seq:${seq}`,
      given.fencing?.token ?? d.fencingToken,
    ),
    heartbeatDetails: given.heartbeatDetails,
    queue: given.queue ?? definition?.queue ?? d.queue,
    workerId: given.workerId ?? d.workerId,
    leaseMs: given.leaseMs ?? definition?.leaseMs ?? d.leaseMs,
    startToCloseTimeoutMs:
      given.startToCloseTimeoutMs ?? definition?.startToCloseTimeoutMs ?? d.startToCloseTimeoutMs,
  });
}

/**
 * Create a {@link MockActivityContext} for unit-testing an activity without a database.
 *
 * ```ts
 * const ctx = createMockActivityContext({ info: { attempt: 3 }, transaction: fakeTx });
 * await expect(ctx.run(charge, { invoiceId: 'inv_1', amountCents: 500 })).resolves.toEqual({ chargeId: 'ch_1' });
 * ```
 * @throws InvalidOptionsError naming each bad option.
 */
export function createMockActivityContext(options: MockActivityContextOptions = {}): MockActivityContext {
  return new MockActivityContext(options);
}
