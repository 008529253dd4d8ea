import pRetry from 'p-retry';

/** How the engine treats a database error (STYLE.md: by SQLSTATE, never by message text). */
export type ErrorClass = 'transient' | 'conflict' | 'fatal';

const TRANSIENT_SQLSTATES = new Set([
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '55P03', // lock_not_available (lock_timeout)
  '57014', // query_canceled (statement_timeout)
  '57P01', // admin_shutdown (pg_terminate_backend, server restart)
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now (server starting up)
  '53300', // too_many_connections
]);
const TRANSIENT_SQLSTATE_CLASSES = new Set(['08', '53']); // connection exception, insufficient resources
/** Socket errnos and postgres.js's own connection codes (it reports these in `code` too). */
const TRANSIENT_ERRNOS = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
]);

/** Every error code (a SQLSTATE or a socket errno) along `error`'s cause chain, and inside AggregateErrors. */
export function codesOf(error: unknown): string[] {
  const codes: string[] = [];
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (current && typeof current === 'object' && !seen.has(current)) {
    seen.add(current);
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') codes.push(code);
    // AggregateError (several addresses refused, e.g. ::1 and 127.0.0.1) holds its causes in `errors`.
    const inner = (current as { errors?: unknown }).errors;
    if (Array.isArray(inner)) for (const e of inner) codes.push(...codesOf(e));
    current = (current as { cause?: unknown }).cause;
  }
  return codes;
}

/** The first SQLSTATE (five characters) in `error`'s `cause` chain, if any. */
export function sqlstateOf(error: unknown): string | undefined {
  return codesOf(error).find((code) => /^[0-9A-Z]{5}$/.test(code));
}

/**
 * True when the database refused a statement because of the content of one of its values (SQLSTATE class 22,
 * data exception: a NUL or bad Unicode in text or jsonb, a number out of range; or 54, a value over a program
 * limit). Retrying the same statement cannot help; the caller records the refusal instead.
 */
export function isContentRefusal(error: unknown): boolean {
  const state = sqlstateOf(error);
  return state !== undefined && (state.startsWith('22') || state.startsWith('54'));
}

/** Classify an error thrown by a database call, walking its `cause` chain. */
export function classifyDatabaseError(error: unknown): ErrorClass {
  const codes = codesOf(error);
  for (const code of codes) {
    if (TRANSIENT_ERRNOS.has(code) || TRANSIENT_SQLSTATES.has(code)) return 'transient';
    if (/^[0-9A-Z]{5}$/.test(code) && TRANSIENT_SQLSTATE_CLASSES.has(code.slice(0, 2))) return 'transient';
    if (/^23[0-9A-Z]{3}$/.test(code)) return 'conflict';
  }
  return 'fatal';
}

/** Options of {@link withInfraRetry}. */
export interface InfraRetryOptions {
  /** Give up after this long in all (ms). @defaultValue 30_000 */
  readonly maxRetryTimeMs?: number;
  /** @defaultValue 8 */
  readonly retries?: number;
  readonly signal?: AbortSignal;
  readonly onRetry?: (error: unknown, attempt: number) => void;
}

/**
 * Run a database operation, retrying it with exponential backoff (p-retry) while it fails with a transient
 * error (connection loss, serialization failure, deadlock, lock or statement timeout, server restart). These
 * retries never consume an activity attempt. The operation must be idempotent under an unknown commit
 * outcome — every engine write is (ids generated before sending, nonces on owner writes).
 * Non-transient errors are thrown at once.
 */
export function withInfraRetry<T>(operation: () => Promise<T>, options: InfraRetryOptions = {}): Promise<T> {
  return pRetry(operation, {
    retries: options.retries ?? 8,
    minTimeout: 50,
    maxTimeout: 2_000,
    factor: 2,
    randomize: true,
    maxRetryTime: options.maxRetryTimeMs ?? 30_000,
    ...(options.signal ? { signal: options.signal } : {}),
    shouldRetry: ({ error }) => classifyDatabaseError(error) === 'transient',
    onFailedAttempt: ({ error, attemptNumber }) => {
      if (classifyDatabaseError(error) === 'transient') options.onRetry?.(error, attemptNumber);
    },
  });
}
