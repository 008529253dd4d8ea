/**
 * The error hierarchy shared by the engine and user code.
 *
 * Every error Palisade raises is a {@link PalisadeError} with a stable string `code`; the message starts
 * with that code in brackets, so logs and tests can match on it without parsing prose. Errors that cross
 * a process or database boundary are matched by `code` (or `name`), never by `instanceof` alone, because a
 * failure read back from the database is rebuilt from its serialized form.
 *
 * @module
 */

import { jsonProblems, storableText, utf8Bytes } from './json-value.js';
import { renamesAt, type ParsedOptions } from './renamed-options.js';

/** Stable machine-readable error codes. */
export type PalisadeErrorCode =
  | 'LEASE_LOST'
  | 'ATTEMPT_ABORTED'
  | 'INVALID_OPTIONS'
  | 'VALIDATION_FAILED'
  | 'RUN_NOT_FOUND'
  | 'SCHEDULE_NOT_FOUND'
  | 'SCHEDULE_EXISTS'
  | 'RUN_FAILED'
  | 'RUN_CANCELLED'
  | 'RUN_ENDED'
  | 'RESULT_TIMEOUT'
  | 'SCHEMA_TOO_NEW'
  | 'NON_DETERMINISM'
  | 'APPLICATION_FAILURE'
  | 'ACTIVITY_FAILURE'
  | 'CHILD_WORKFLOW_FAILURE'
  | 'CANCELLED'
  | 'TIMED_OUT'
  | 'DATABASE_UNAVAILABLE'
  | 'DATABASE_NOT_FOUND'
  | 'DATABASE_AUTH_FAILED'
  | 'EMBEDDED_DATABASE_LOCKED'
  | 'RUN_KEY_CONFLICT'
  | 'ENGINE_CLOSED'
  | 'NOT_REGISTERED'
  | 'NON_DURABLE_AWAIT'
  | 'WORKFLOW_FAILED'
  | 'PAYLOAD_TOO_LARGE'
  | 'DATABASE_ERROR'
  | 'FENCED_TRANSACTION_NESTED'
  | 'FENCED_TRANSACTION_ABORTED';

/**
 * How many characters of a caller's value (an id, a name, a key, an option) an error message repeats.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const ECHOED_CHARS = 100;

/**
 * `value` as an error message repeats it: its first `maxChars` characters (default {@link ECHOED_CHARS}), then
 * `…(N more characters)` when it is longer, so that a 10,000-character id or name given by a caller does not come
 * back 10,000 characters long in the message (and in every log line that prints it). A non-string is shown with
 * `String()`. Every message that repeats a caller's value goes through this one function; the full value may stay
 * in a structured field of the error (`runId`, `issues`, …).
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function echoed(value: unknown, maxChars: number = ECHOED_CHARS): string {
  const text = typeof value === 'string' ? value : safeString(value);
  if (text.length <= maxChars) return text;
  let head = text.slice(0, maxChars);
  // Do not leave half of a surrogate pair at the cut.
  if (/[\uD800-\uDBFF]$/.test(head)) head = head.slice(0, -1);
  return `${head}…(${(text.length - head.length).toLocaleString('en-US')} more characters)`;
}

function safeString(value: unknown): string {
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** Context fields an error may carry; all optional, all readonly once set. */
export interface PalisadeErrorContext {
  readonly runId?: string | undefined;
  readonly stepId?: string | undefined;
  readonly attempt?: number | undefined;
  readonly token?: bigint | undefined;
}

/** Options accepted by every {@link PalisadeError} constructor. */
export interface PalisadeErrorOptions extends PalisadeErrorContext {
  readonly cause?: unknown;
}

/**
 * Root of every error Palisade raises.
 *
 * `message` always starts with `[CODE]`. Context fields (`runId`, `stepId`, `attempt`, `token`) are set when
 * known.
 */
export class PalisadeError extends Error implements PalisadeErrorContext {
  readonly code: PalisadeErrorCode;
  readonly runId?: string | undefined;
  readonly stepId?: string | undefined;
  readonly attempt?: number | undefined;
  readonly token?: bigint | undefined;

  constructor(code: PalisadeErrorCode, message: string, options: PalisadeErrorOptions = {}) {
    super(`[${code}] ${message}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    if (options.runId !== undefined) this.runId = options.runId;
    if (options.stepId !== undefined) this.stepId = options.stepId;
    if (options.attempt !== undefined) this.attempt = options.attempt;
    if (options.token !== undefined) this.token = options.token;
  }

  /**
   * A plain, JSON-serialisable view of the error: `name`, `code`, `message`, every context field (bigints such as
   * `token` as decimal strings) and the `cause`'s name, code and message. `JSON.stringify(error)` uses it.
   */
  toJSON(): Record<string, unknown> {
    const out: Record<string, unknown> = { name: this.name, code: this.code, message: this.message };
    for (const [key, value] of Object.entries(this)) out[key] = jsonSafe(value);
    if (this.cause !== undefined) out.cause = jsonSafe(this.cause);
    return out;
  }
}

/** `value` with bigints as decimal strings and errors as `{ name, code?, message }`, recursively. */
function jsonSafe(value: unknown, depth = 0): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value === null || typeof value !== 'object' || depth > 8) return value;
  if (value instanceof PalisadeError) return value.toJSON();
  if (value instanceof Error) {
    const code = (value as { code?: unknown }).code;
    return { name: value.name, ...(typeof code === 'string' ? { code } : {}), message: value.message };
  }
  if (value instanceof Date || typeof (value as { toJSON?: unknown }).toJSON === 'function') return value;
  if (Array.isArray(value)) return value.map((v) => jsonSafe(v, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, jsonSafe(v, depth + 1)]));
}

/** Which owner-side operation a fenced write was. */
export type FencedOperation =
  'heartbeat' | 'complete' | 'fail' | 'release' | 'cancel' | 'fenced-transaction' | 'fenced-resource';

/** Fields of a {@link LeaseLostError}. */
export interface LeaseLostDetails extends PalisadeErrorContext {
  /** What the superseded attempt tried to do. */
  readonly operation: FencedOperation;
  /** Human name of the step, e.g. `charge#3` (activity name and position). */
  readonly stepLabel: string;
  /** The token the rejected writer held. */
  readonly staleToken: bigint;
  /** The step's token when the write was rejected; `null` if the step has no owner or no longer exists. */
  readonly currentToken: bigint | null;
  /** Why the write matched nothing, e.g. `superseded`, `expired`, `completed`, `cancelled`. */
  readonly reason: string;
}

/**
 * A fenced write matched nothing: the attempt no longer owns its lease (superseded by a newer token, expired,
 * or the step already ended). Never retried in place; after it, the attempt context is poisoned and every
 * later call throws this error again without touching the database.
 */
export class LeaseLostError extends PalisadeError {
  readonly operation: FencedOperation;
  readonly stepLabel: string;
  readonly staleToken: bigint;
  readonly currentToken: bigint | null;
  readonly reason: string;

  constructor(details: LeaseLostDetails, options: { cause?: unknown } = {}) {
    const by =
      details.currentToken !== null && details.currentToken !== details.staleToken
        ? `was superseded by token ${details.currentToken}`
        : `lost its lease (${details.reason})`;
    super(
      'LEASE_LOST',
      `${details.operation} rejected: step ${details.stepLabel} attempt ${details.attempt ?? '?'} ` +
        `(token ${details.staleToken}) ${by}. This attempt no longer owns the step: stop its work and discard its results.`,
      { ...details, token: details.staleToken, cause: options.cause },
    );
    this.operation = details.operation;
    this.stepLabel = details.stepLabel;
    this.staleToken = details.staleToken;
    this.currentToken = details.currentToken;
    this.reason = details.reason;
  }
}

/** Why an attempt's `AbortSignal` fired. */
export type AbortReason = 'lease-lost' | 'lease-expired-locally' | 'deadline' | 'cancelled' | 'shutdown';

/**
 * The `reason` of an attempt's `AbortSignal` (`ctx.signal.reason`). `reason` says why:
 * - `lease-lost`: a heartbeat or fenced write was rejected (`cause` is the {@link LeaseLostError});
 * - `lease-expired-locally`: the worker's conservative local lease estimate ran out (e.g. database unreachable);
 * - `deadline`: the attempt's start-to-close timeout passed;
 * - `cancelled`: the run or step was cancelled;
 * - `shutdown`: the worker is stopping and its grace period ended.
 */
export class AttemptAbortedError extends PalisadeError {
  readonly reason: AbortReason;
  constructor(reason: AbortReason, message: string, options: PalisadeErrorOptions = {}) {
    super('ATTEMPT_ABORTED', `${reason}: ${message}`, options);
    this.reason = reason;
  }
}

/**
 * How long a phrase that holds a caller's value may be in a message (`where` of an {@link InvalidOptionsError},
 * `what` of a {@link ValidationError} or {@link RunNotFoundError}, one issue): a backstop behind {@link echoed} at
 * each value, for a phrase built without it.
 */
const PHRASE_CHARS = 300;

/** At most this many issues are listed in a message (the error's `issues` holds them all). */
const LISTED_ISSUES = 10;

/** `issues` as a message lists them: `path: message; …`, each capped, at most {@link LISTED_ISSUES} of them. */
function issueList(issues: readonly { path: string; message: string }[], root = ''): string {
  const listed = issues.slice(0, LISTED_ISSUES).map((i) => {
    const path = i.path || root;
    return echoed(path ? `${path}: ${i.message}` : i.message, PHRASE_CHARS);
  });
  if (issues.length > LISTED_ISSUES) listed.push(`…and ${issues.length - LISTED_ISSUES} more problems`);
  return listed.join('; ');
}

/** Options or parameters were refused; the message names each bad field, its value and the rule. */
export class InvalidOptionsError extends PalisadeError {
  /** One entry per problem: `path` like `worker.heartbeatIntervalMs`, and what is wrong with it. */
  readonly issues: readonly { readonly path: string; readonly message: string }[];
  constructor(where: string, issues: readonly { path: string; message: string }[]) {
    super('INVALID_OPTIONS', `invalid ${echoed(where, PHRASE_CHARS)}: ${issueList(issues)}`);
    this.issues = issues;
  }
}

/** A workflow or activity input or output failed its zod schema; names the definition, field path and problem. */
export class ValidationError extends PalisadeError {
  readonly issues: readonly { readonly path: string; readonly message: string }[];
  constructor(
    what: string,
    issues: readonly { path: string; message: string }[],
    context: PalisadeErrorContext = {},
  ) {
    super(
      'VALIDATION_FAILED',
      `${echoed(what, PHRASE_CHARS)} is invalid: ${issueList(issues, '(root)')}`,
      context,
    );
    this.issues = issues;
  }
}

/** Options of {@link ApplicationFailure}. */
export interface ApplicationFailureOptions {
  /** Error type, matched against `RetryPolicy.nonRetryableErrorTypes`. @defaultValue `'ApplicationFailure'` */
  readonly type?: string;
  /** When true the step fails at once, whatever the retry policy says. @defaultValue false */
  readonly nonRetryable?: boolean;
  /** JSON-serializable details stored with the failure. */
  readonly details?: unknown;
  readonly cause?: unknown;
}

/**
 * Throw from an activity to fail the attempt with an explicit type and retryability.
 *
 * Any other thrown error converts by these rules: `type` is the error's `name` (or `'Error'` for a non-Error
 * value), it is retryable, and its message and stack are kept.
 */
export class ApplicationFailure extends PalisadeError {
  readonly type: string;
  readonly nonRetryable: boolean;
  readonly details: unknown;

  constructor(message: string, options: ApplicationFailureOptions = {}) {
    super('APPLICATION_FAILURE', message, { cause: options.cause });
    this.type = options.type ?? 'ApplicationFailure';
    this.nonRetryable = options.nonRetryable ?? false;
    this.details = options.details;
  }

  /** A failure that the retry policy may retry. */
  static retryable(message: string, type?: string, details?: unknown): ApplicationFailure {
    return new ApplicationFailure(message, { type, details, nonRetryable: false });
  }

  /** A failure that ends the step at once. */
  static nonRetryable(message: string, type?: string, details?: unknown): ApplicationFailure {
    return new ApplicationFailure(message, { type, details, nonRetryable: true });
  }
}

/** The JSON form of a failure as stored in the database (`steps.error`, `runs.error`, events). */
export interface SerializedFailure {
  readonly type: string;
  readonly message: string;
  readonly nonRetryable: boolean;
  readonly code?: string | undefined;
  readonly details?: unknown;
  readonly stack?: string | undefined;
}

function isApplicationFailureLike(error: unknown): error is ApplicationFailure {
  return (
    error instanceof Error &&
    (error as { code?: unknown }).code === 'APPLICATION_FAILURE' &&
    typeof (error as { type?: unknown }).type === 'string'
  );
}

/** Limits of a stored failure (the same numbers as `PAYLOAD_LIMITS`, which re-exports them). */
export const FAILURE_LIMITS = Object.freeze({
  errorMessageChars: 8_192,
  errorStackChars: 16_384,
  errorDetailsBytes: 65_536,
  typeChars: 256,
});

/**
 * Convert anything thrown into its stored form, by the rules documented on {@link ApplicationFailure}. The
 * result is always storable: message and stack are cut to {@link FAILURE_LIMITS} (with a note of the full
 * length), NUL characters and lone surrogates become U+FFFD, and `details` that are not JSON (or too big) are
 * dropped with a note in the message — a failure is recorded whatever was thrown.
 */
export function serializeFailure(error: unknown): SerializedFailure {
  return storableFailure(rawFailure(error));
}

/**
 * `failure` with every field storable; see {@link serializeFailure}.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function storableFailure(failure: SerializedFailure): SerializedFailure {
  let message = typeof failure.message === 'string' ? failure.message : String(failure.message);
  let details = failure.details;
  if (details !== undefined) {
    const problem = jsonProblems(details, 1)[0];
    let dropped: string | undefined;
    if (problem) dropped = `${problem.path || '(root)'}: ${problem.message}`;
    else {
      const bytes = utf8Bytes(JSON.stringify(details));
      if (bytes > FAILURE_LIMITS.errorDetailsBytes)
        dropped = `${bytes} bytes, over the limit of ${FAILURE_LIMITS.errorDetailsBytes}`;
    }
    if (dropped !== undefined) {
      details = undefined;
      message = `${message} [details dropped: ${dropped}]`;
    }
  }
  const out: { -readonly [K in keyof SerializedFailure]: SerializedFailure[K] } = {
    type: storableText(String(failure.type), FAILURE_LIMITS.typeChars),
    message: storableText(message, FAILURE_LIMITS.errorMessageChars),
    nonRetryable: failure.nonRetryable === true,
  };
  if (failure.code !== undefined) out.code = storableText(String(failure.code), FAILURE_LIMITS.typeChars);
  if (details !== undefined) out.details = details;
  if (failure.stack !== undefined)
    out.stack = storableText(String(failure.stack), FAILURE_LIMITS.errorStackChars);
  return out;
}

function rawFailure(error: unknown): SerializedFailure {
  // Matched by code, not only instanceof: a second copy of the sdk in the process must not turn a
  // non-retryable failure into a retryable one.
  if (error instanceof ApplicationFailure || isApplicationFailureLike(error)) {
    return {
      type: error.type,
      message: error.message.replace(/^\[APPLICATION_FAILURE\] /, ''),
      nonRetryable: error.nonRetryable,
      code: error.code,
      details: error.details,
      stack: error.stack,
    };
  }
  if (error instanceof PalisadeError) {
    return {
      type: error.name,
      message: error.message,
      nonRetryable: false,
      code: error.code,
      stack: error.stack,
    };
  }
  if (error instanceof Error) {
    return { type: error.name || 'Error', message: error.message, nonRetryable: false, stack: error.stack };
  }
  let text: string;
  try {
    text = typeof error === 'string' ? error : JSON.stringify(error);
  } catch {
    text = String(error);
  }
  return { type: 'Error', message: `non-Error value thrown: ${text}`, nonRetryable: false };
}

/**
 * A step failed for good (its retries are exhausted or it was non-retryable). `failure` is the stored form of
 * the last attempt's error.
 */
export class ActivityFailure extends PalisadeError {
  readonly activityName: string;
  readonly failure: SerializedFailure;
  constructor(activityName: string, failure: SerializedFailure, context: PalisadeErrorContext = {}) {
    super(
      'ACTIVITY_FAILURE',
      `activity ${activityName} failed: ${failure.type}: ${failure.message}`,
      context,
    );
    this.activityName = activityName;
    this.failure = failure;
  }
}

/**
 * A child run started with `ctx.runChild` failed, was cancelled on its own, or could not start (its key names an
 * existing run): thrown at the parent's await. `failure` is the child's stored failure; `childRunId` its run id.
 */
export class ChildWorkflowFailure extends PalisadeError {
  readonly workflowName: string;
  readonly childRunId: string | undefined;
  readonly failure: SerializedFailure;
  constructor(
    workflowName: string,
    childRunId: string | undefined,
    failure: SerializedFailure,
    context: PalisadeErrorContext = {},
  ) {
    super(
      'CHILD_WORKFLOW_FAILURE',
      `child workflow ${workflowName}${childRunId ? ` (run ${childRunId})` : ''} failed: ${failure.type}: ${failure.message}`,
      context,
    );
    this.workflowName = workflowName;
    this.childRunId = childRunId;
    this.failure = failure;
  }
}

/** A run or step was cancelled; thrown at the pending await in workflow code and by `handle.result()`. */
export class CancelledFailure extends PalisadeError {
  readonly reason: string;
  constructor(reason: string, context: PalisadeErrorContext = {}) {
    super('CANCELLED', `cancelled: ${reason}`, context);
    this.reason = reason;
  }
}

/** A run id, idempotency key or step does not exist. */
export class RunNotFoundError extends PalisadeError {
  constructor(what: string) {
    super(
      'RUN_NOT_FOUND',
      `${echoed(what, PHRASE_CHARS)} does not exist; check the id (runs list shows existing runs)`,
    );
  }
}

/**
 * A signal was sent to a run that has ended (`completed`, `failed` or `cancelled`): nothing was stored. `status` is
 * the run's.
 */
export class RunEndedError extends PalisadeError {
  readonly status: string;
  constructor(runId: string, status: string, what: string) {
    super(
      'RUN_ENDED',
      `run ${echoed(runId)} has ended (${status}): ${echoed(what, PHRASE_CHARS)} was not sent`,
      {
        runId,
      },
    );
    this.status = status;
  }
}

/** `handle.result()` found the run ended `failed`; `failure` is the run's stored error. */
export class RunFailedError extends PalisadeError {
  readonly failure: SerializedFailure;
  constructor(runId: string, failure: SerializedFailure) {
    super('RUN_FAILED', `run ${echoed(runId)} failed: ${failure.type}: ${failure.message}`, { runId });
    this.failure = failure;
  }
}

/** Replay found recorded history that does not match the workflow code. */
export class NonDeterminismError extends PalisadeError {
  readonly position: number;
  readonly recorded: string;
  readonly current: string;
  /**
   * @param hint replaces the default explanation (a code change) when the engine saw a likelier cause, such as
   * workflow code that called `Math.random()` or `Date.now()`.
   */
  constructor(
    workflowName: string,
    position: number,
    recorded: string,
    current: string,
    runId?: string,
    hint?: string,
  ) {
    super(
      'NON_DETERMINISM',
      `workflow ${workflowName} replayed step ${position} as ${current}, but history recorded ${recorded}; ` +
        (hint ??
          'the workflow code changed under an in-flight run. Deploy the old code to finish it, or cancel it.'),
      { runId },
    );
    this.position = position;
    this.recorded = recorded;
    this.current = current;
  }
}

/**
 * Convert zod issues to `{ path, message }` pairs with dotted paths (`items.3.amount`).
 *
 * With `parsed` (the options schema and the value it refused), an unknown key that is an old option name is
 * answered with the new one where that schema takes it (`Unrecognized key: "every" (renamed: "every" is now
 * "everyMs")`), and the schema's complaint that the new name is missing is left out: the hint says it. Without it
 * (a payload checked against a user's schema), unknown keys get no hint.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function formatIssues(
  issues: readonly {
    readonly path: readonly PropertyKey[];
    readonly message: string;
    readonly code?: unknown;
    readonly keys?: unknown;
  }[],
  parsed?: ParsedOptions,
): { path: string; message: string }[] {
  const renamed = new Map<(typeof issues)[number], readonly { from: string; to: string }[]>();
  // The paths of new names the value left out, whose old name it gave: the rename hint answers for them.
  const answered: (readonly PropertyKey[])[] = [];
  for (const i of issues) {
    if (!parsed || i.code !== 'unrecognized_keys' || !Array.isArray(i.keys)) continue;
    const renames = renamesAt(parsed, i.path, i.keys as unknown[]);
    renamed.set(i, renames);
    for (const r of renames) if (r.missing) answered.push([...i.path, r.to]);
  }
  const isAnswered = (path: readonly PropertyKey[]) =>
    answered.some((a) => a.length <= path.length && a.every((key, k) => path[k] === key));
  return issues
    .filter((i) => i.code === 'unrecognized_keys' || !isAnswered(i.path))
    .map((i) => ({
      path: i.path.map((p) => echoed(String(p))).join('.'),
      message: unrecognizedKeys(i, renamed.get(i) ?? []) ?? i.message,
    }));
}

/**
 * zod's message for unknown keys, with each key capped by {@link echoed} (zod repeats them whole) and, for an old
 * option name, the new one: `Unrecognized key: "every" (renamed: "every" is now "everyMs")`.
 */
function unrecognizedKeys(
  issue: { readonly code?: unknown; readonly keys?: unknown },
  renames: readonly { from: string; to: string }[],
): string | undefined {
  if (issue.code !== 'unrecognized_keys' || !Array.isArray(issue.keys)) return undefined;
  const keys = (issue.keys as unknown[]).map((k) => JSON.stringify(echoed(k)));
  const listed = renames.map((r) => `"${r.from}" is now "${r.to}"`);
  const hint = listed.length > 0 ? ` (renamed: ${listed.join(', ')})` : '';
  return `Unrecognized key${keys.length === 1 ? '' : 's'}: ${keys.slice(0, LISTED_ISSUES).join(', ')}${keys.length > LISTED_ISSUES ? `, …and ${keys.length - LISTED_ISSUES} more` : ''}${hint}`;
}

/**
 * True when `error` is a Palisade error (with `code`, if given). Matched by `code` and the `[CODE]` message
 * prefix rather than `instanceof` alone, so an error rebuilt from its stored form or thrown by a second copy of
 * the sdk still matches.
 */
export function isPalisadeError<C extends PalisadeErrorCode>(
  error: unknown,
  code?: C,
): error is PalisadeError & { readonly code: C } {
  if (!(error instanceof Error)) return false;
  const actual = (error as { code?: unknown }).code;
  if (typeof actual !== 'string') return false;
  if (!(error instanceof PalisadeError) && !error.message.startsWith(`[${actual}]`)) return false;
  return code === undefined || actual === code;
}
