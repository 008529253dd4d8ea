import { z } from 'zod';
import { rateLimitSchema, type RateLimit, type ResolvedRateLimit } from './flow-control.js';
import { durationMs, type Duration } from './duration.js';
import { InvalidOptionsError, echoed } from './errors.js';
import { parseOptions } from './validate.js';
import { resolveRetryPolicy, type ResolvedRetryPolicy, type RetryPolicy } from './retry-policy.js';

/**
 * The type of `tx` inside `ctx.fencedTransaction`. The engine registers its database transaction type here
 * (declaration merging on {@link FencedTransactionRegistry}), so code that imports only `@palisade/sdk`
 * sees `unknown` and code compiled together with `@palisade/engine` sees a drizzle transaction.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface FencedTransactionRegistry {}

/** The transaction handed to `ctx.fencedTransaction(fn)`; see {@link FencedTransactionRegistry}. */
export type FencedTransaction = FencedTransactionRegistry extends { transaction: infer T } ? T : unknown;

/** A fencing sequencer to hand to external systems: they keep the highest token per scope and refuse lower ones. */
export interface FencingInfo {
  /**
   * The unit of work the token fences: `run:<runId>/seq:<seq>` for a workflow's step, `run:<runId>` for a
   * standalone activity (steps recorded before 0.1's migration 0005 keep `step:<stepId>`). Stable across retries,
   * retirement and re-creation of the step, so every later attempt of the same work supersedes every earlier one
   * in a resource that keeps the highest token per scope.
   */
  readonly scope: string;
  /** Strictly increasing per scope (attempts of one unit of work), from one global sequence; never reused. */
  readonly token: bigint;
  /** `token` as a decimal string, for systems and logs that have no 64-bit integers (JSON). */
  readonly tokenString: string;
  /** `{ scope, token }` with the token as a decimal string, so `JSON.stringify(ctx.info)` works. */
  toJSON(): { readonly scope: string; readonly token: string };
}

/**
 * A frozen {@link FencingInfo} for `scope` and `token`. `tokenString` and `toJSON` are not enumerable, so
 * spreading or deep-comparing the info sees only `{ scope, token }`.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function fencingInfo(scope: string, token: bigint): FencingInfo {
  const tokenString = token.toString();
  const info = { scope, token } as FencingInfo;
  Object.defineProperties(info, {
    tokenString: { value: tokenString, enumerable: false },
    toJSON: { value: () => ({ scope, token: tokenString }), enumerable: false },
  });
  return Object.freeze(info);
}

/** What an activity attempt knows about itself (`ctx.info`). */
export interface ActivityInfo {
  readonly runId: string;
  readonly stepId: string;
  readonly activityName: string;
  /** Position of the step in its run (0 for a standalone activity). */
  readonly seq: number;
  /** Attempts charged to the retry budget so far, this one included; starts at 1. */
  readonly attempt: number;
  /** Claims of this step so far, this one included (a released claim counts here, not in `attempt`). */
  readonly epoch: number;
  readonly fencing: FencingInfo;
  /** The details the previous attempt last passed to `ctx.heartbeat`, for resuming; `undefined` if none. */
  readonly heartbeatDetails: unknown;
  readonly queue: string;
  readonly workerId: string;
  /** Lease length in ms. */
  readonly leaseMs: number;
  /** Start-to-close timeout in ms: the attempt's deadline counts from its claim. */
  readonly startToCloseTimeoutMs: number;
}

/**
 * The context passed to an activity's `run(input, ctx)`. Legal only while the attempt runs; after the attempt
 * lost its lease every method throws `LeaseLostError` without touching the database.
 */
export interface ActivityContext {
  readonly info: ActivityInfo;
  /**
   * Fires when the attempt must stop; `signal.reason` is an `AttemptAbortedError` whose `reason` says why
   * (`lease-lost`, `lease-expired-locally`, `deadline`, `cancelled`, `shutdown`). Pass it to fetch, child
   * processes and timers.
   */
  readonly signal: AbortSignal;
  /**
   * Extend the lease now and store `details` (JSON-serializable) for a later attempt to resume from. The
   * worker also heartbeats on its own every `heartbeatIntervalMs`; calling this is optional.
   * Details must survive the JSON round trip (see `checkPayload`) and fit 64 KiB; bad ones are refused by this
   * call and never reach the worker's shared heartbeat statement.
   * @throws LeaseLostError when the attempt was superseded or its lease expired (the signal fires too).
   * @throws ValidationError naming the path of details that cannot be stored; PalisadeError `PAYLOAD_TOO_LARGE`.
   */
  heartbeat(details?: unknown): Promise<void>;
  /**
   * Run `fn` in a database transaction whose last statement is the fence: the transaction commits only if this
   * attempt still holds the current token and an unexpired lease, and rolls back otherwise. Keep it short:
   * the server ends a transaction idle for longer than a third of the lease.
   * If the connection fails (the server ended the session, a reset, a lost COMMIT reply), the engine settles the
   * outcome by transaction id before answering: committed → `fn`'s result; rolled back with the lease lost →
   * LeaseLostError; rolled back with the lease still held → the connection error, which then means "not
   * committed". Only when the database stays unreachable until the local lease deadline is the error ambiguous.
   * @throws LeaseLostError when the fence fails (nothing `fn` wrote is committed).
   * @throws PalisadeError `FENCED_TRANSACTION_NESTED` when called inside another fenced transaction's `fn` (they
   * do not nest: use the outer `tx`).
   * @throws PalisadeError `FENCED_TRANSACTION_ABORTED` when `fn` caught an SQL error of its own and went on, which
   * leaves the transaction aborted (SQLSTATE 25P02); nothing it wrote is committed. Use a savepoint
   * (`tx.transaction(...)`) around a statement that may fail.
   */
  fencedTransaction<T>(fn: (tx: FencedTransaction) => Promise<T>): Promise<T>;
}

/** Options of {@link defineActivity}. */
export interface ActivityOptions<I extends z.ZodType, O extends z.ZodType> {
  /** Unique name among the activities a worker serves; stored with every step. */
  readonly name: string;
  /** zod schema of the input, checked when the step is scheduled and when the attempt starts. */
  readonly input: I;
  /** zod schema of the output, checked before completion is recorded. */
  readonly output: O;
  readonly retry?: RetryPolicy;
  /** Deadline of one attempt, counted from its claim. @defaultValue 10 minutes */
  readonly startToCloseTimeoutMs?: Duration;
  /** Lease length; must be ≥ 3 s (the worker's heartbeat interval must be ≤ lease/3). @defaultValue 30 s */
  readonly leaseMs?: Duration;
  /** Queue a step of this activity is put on unless the caller says otherwise. @defaultValue `'default'` */
  readonly queue?: string;
  /**
   * At most `limit` starts (claimed attempts) per `periodMs` for each `key`, judged by the database clock; a call's
   * own `rateLimit` replaces it. @defaultValue none
   */
  readonly rateLimit?: RateLimit;
  /** The side-effecting function. Throw `ApplicationFailure` to control retryability. */
  run(input: z.output<I>, ctx: ActivityContext): Promise<z.input<O>>;
}

/** An activity as returned by {@link defineActivity}: options resolved, frozen. */
export interface ActivityDefinition<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  readonly kind: 'activity';
  readonly name: string;
  readonly input: I;
  readonly output: O;
  readonly retry: ResolvedRetryPolicy;
  readonly startToCloseTimeoutMs: number;
  readonly leaseMs: number;
  readonly queue: string;
  /** The activity's rate limit, if it has one. */
  readonly rateLimit: ResolvedRateLimit | undefined;
  run(input: z.output<I>, ctx: ActivityContext): Promise<z.input<O>>;
}

/** Defaults of {@link ActivityOptions}. */
export const ACTIVITY_DEFAULTS = Object.freeze({
  startToCloseTimeoutMs: 10 * 60_000,
  leaseMs: 30_000,
  queue: 'default',
});

/** Smallest lease the engine accepts outside tests (`@palisade/engine/testing` may go lower). */
export const MIN_LEASE_MS = 3_000;

const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

const activityOptionsSchema = z
  .object({
    name: z.string().regex(NAME, 'must be 1–128 characters of letters, digits, and _ . : -'),
    input: z.unknown(),
    output: z.unknown(),
    run: z.unknown(),
    retry: z.unknown().optional(),
    startToCloseTimeoutMs: durationMs.pipe(z.number().min(1, 'must be > 0')).optional(),
    leaseMs: durationMs.pipe(z.number().max(3_600_000, 'must be ≤ 1 hour')).optional(),
    queue: z.string().regex(NAME, 'must be 1–128 characters of letters, digits, and _ . : -').optional(),
    rateLimit: rateLimitSchema.optional(),
  })
  .strict();

/**
 * Define an activity: a side-effecting function with zod-checked input and output, a retry policy and
 * timeouts. The lease floor (≥ 3 s) is enforced when a worker starts, so tests can lower it through
 * `@palisade/engine/testing`.
 * @throws InvalidOptionsError naming each bad option.
 */
export function defineActivity<I extends z.ZodType, O extends z.ZodType>(
  options: ActivityOptions<I, O>,
): ActivityDefinition<I, O> {
  const o = parseOptions(activityOptionsSchema, options, `activity ${echoed(options.name)}`);
  if (typeof options.run !== 'function') {
    throw new InvalidOptionsError(`activity ${echoed(options.name)}`, [
      { path: 'run', message: 'must be a function' },
    ]);
  }
  for (const key of ['input', 'output'] as const) {
    if (!(options[key] instanceof z.ZodType)) {
      throw new InvalidOptionsError(`activity ${echoed(options.name)}`, [
        { path: key, message: 'must be a zod schema' },
      ]);
    }
  }
  return Object.freeze({
    kind: 'activity' as const,
    name: options.name,
    input: options.input,
    output: options.output,
    retry: resolveRetryPolicy(options.retry, `activity ${options.name} retry`),
    startToCloseTimeoutMs: o.startToCloseTimeoutMs ?? ACTIVITY_DEFAULTS.startToCloseTimeoutMs,
    leaseMs: o.leaseMs ?? ACTIVITY_DEFAULTS.leaseMs,
    queue: o.queue ?? ACTIVITY_DEFAULTS.queue,
    rateLimit: o.rateLimit,
    run: (input: z.output<I>, ctx: ActivityContext) => options.run(input, ctx),
  });
}
