import {
  FAILURE_LIMITS,
  InvalidOptionsError,
  PalisadeError,
  ValidationError,
  type PalisadeErrorContext,
} from './errors.js';
import { jsonProblems, textProblem, utf8Bytes } from './json-value.js';

/**
 * The size caps of what Palisade stores, in bytes of JSON (UTF-8) or characters. A bigger input, output or
 * heartbeat detail is refused by the call that brought it; an error's message and stack are cut (with a note of
 * the full length), never refused, so a failure is always recorded.
 */
export const PAYLOAD_LIMITS = Object.freeze({
  /** Input of a run or a step (`start`, `enqueue`, `ctx.run`). */
  inputBytes: 1_048_576,
  /** Output of an activity or a workflow. */
  outputBytes: 1_048_576,
  /** Details of one `ctx.heartbeat(details)`. */
  heartbeatDetailsBytes: 65_536,
  /** One `ctx.setProgress(value)` of a workflow. */
  progressBytes: 65_536,
  /** `details` of an `ApplicationFailure`; bigger details are dropped from the stored failure (with a note). */
  errorDetailsBytes: FAILURE_LIMITS.errorDetailsBytes,
  /** Characters of a stored error message. */
  errorMessageChars: FAILURE_LIMITS.errorMessageChars,
  /** Characters of a stored stack trace. */
  errorStackChars: FAILURE_LIMITS.errorStackChars,
  /** Characters of a free-text parameter (an idempotency key is ≤ 512, a cancel reason ≤ this). */
  textChars: 4_096,
});

/**
 * Check that `value` survives the JSON round trip into PostgreSQL unchanged and fits `maxBytes`, and return its
 * JSON text. Refused: `Date`, `Map`, `Set`, class instances, BigInt, `NaN`/`Infinity`, functions, symbols,
 * `undefined` array elements, cycles, strings or keys holding NUL or a lone surrogate.
 * @param what names the value in the error, e.g. `input of activity charge`.
 * @throws ValidationError (`VALIDATION_FAILED`) naming each bad field's path and the problem.
 * @throws PalisadeError `PAYLOAD_TOO_LARGE` when the JSON is longer than `maxBytes`.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function checkPayload(
  value: unknown,
  what: string,
  maxBytes: number,
  context: PalisadeErrorContext = {},
): string {
  const problems = jsonProblems(value);
  if (problems.length > 0) throw new ValidationError(what, problems, context);
  const text = JSON.stringify(value ?? null);
  // Every UTF-16 unit is at most 3 bytes of UTF-8: skip the count when even that fits.
  const bytes = text.length * 3 <= maxBytes ? text.length : utf8Bytes(text);
  if (bytes > maxBytes) {
    throw new PalisadeError(
      'PAYLOAD_TOO_LARGE',
      `${what} is ${bytes.toLocaleString('en-US')} bytes of JSON, over the limit of ` +
        `${maxBytes.toLocaleString('en-US')} bytes; store large data elsewhere and pass a reference`,
      context,
    );
  }
  return text;
}

/**
 * Check a free-text parameter (an idempotency key, a cancel reason, a worker id) that is stored as `text`.
 * @throws InvalidOptionsError naming `what` when it is not a string, too long, or not storable.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function checkText(text: string, what: string, maxChars: number = PAYLOAD_LIMITS.textChars): string {
  const problem =
    typeof text !== 'string'
      ? `must be a string, got ${typeof text}`
      : text.length > maxChars
        ? `is ${text.length} characters, over the limit of ${maxChars}`
        : textProblem(text);
  if (problem !== undefined) throw new InvalidOptionsError(what, [{ path: '', message: problem }]);
  return text;
}
