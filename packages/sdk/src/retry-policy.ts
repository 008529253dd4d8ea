import { z } from 'zod';
import { MAX_DURATION_MS, durationMs, type Duration } from './duration.js';
import { type SerializedFailure } from './errors.js';
import { parseOptions } from './validate.js';
import { textProblem } from './json-value.js';

/**
 * How a failed activity is retried. Persisted with each step, so a retry keeps its schedule across worker
 * restarts. The delay before attempt n+1 is `min(initialIntervalMs × backoffCoefficient^(n−1),
 * maximumIntervalMs)`, reduced by a random fraction of up to `jitter` so retries of many steps spread out.
 */
export interface RetryPolicy {
  /** Delay before the first retry. @defaultValue 1_000 (ms) */
  readonly initialIntervalMs?: Duration;
  /**
   * Multiplier applied per attempt. Must be ≥ 1, and `initialIntervalMs × backoffCoefficient` a finite number.
   * @defaultValue 2
   */
  readonly backoffCoefficient?: number;
  /**
   * Upper bound of a delay. Must be ≥ initialIntervalMs and ≤ 2,147,483,647 ms (like every duration).
   * @defaultValue 100 × initialIntervalMs, at most 2,147,483,647 ms
   */
  readonly maximumIntervalMs?: Duration;
  /** Attempts in all, the first included; counted at claim time. Must be ≥ 1. @defaultValue 10 */
  readonly maximumAttempts?: number;
  /** Error types (an `ApplicationFailure`'s `type`, or an Error's `name`) that fail the step at once. @defaultValue [] */
  readonly nonRetryableErrorTypes?: readonly string[];
  /** Fraction in [0, 1] by which each delay may be randomly shortened. @defaultValue 0.2 */
  readonly jitter?: number;
}

/**
 * A {@link RetryPolicy} with every default filled in and every duration in ms; this is what is stored.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export interface ResolvedRetryPolicy {
  readonly initialIntervalMs: number;
  readonly backoffCoefficient: number;
  readonly maximumIntervalMs: number;
  readonly maximumAttempts: number;
  readonly nonRetryableErrorTypes: readonly string[];
  readonly jitter: number;
}

/** Defaults of {@link RetryPolicy}. */
export const RETRY_DEFAULTS = Object.freeze({
  initialIntervalMs: 1_000,
  backoffCoefficient: 2,
  maximumAttempts: 10,
  jitter: 0.2,
});

const retryPolicySchema = z
  .object({
    initialIntervalMs: durationMs.optional(),
    backoffCoefficient: z.number().min(1, 'must be ≥ 1').optional(),
    maximumIntervalMs: durationMs.optional(),
    maximumAttempts: z
      .number()
      .int('must be a whole number')
      .min(1, 'must be ≥ 1')
      .max(1_000_000, 'must be ≤ 1,000,000')
      .optional(),
    nonRetryableErrorTypes: z
      .array(
        z
          .string()
          .refine((t) => textProblem(t) === undefined, 'must be storable text (no NUL, no lone surrogate)'),
      )
      .optional(),
    jitter: z.number().min(0, 'must be ≥ 0').max(1, 'must be ≤ 1').optional(),
  })
  .strict()
  .transform((p, ctx): ResolvedRetryPolicy => {
    const initialIntervalMs = p.initialIntervalMs ?? RETRY_DEFAULTS.initialIntervalMs;
    const maximumIntervalMs = p.maximumIntervalMs ?? Math.min(100 * initialIntervalMs, MAX_DURATION_MS);
    const backoffCoefficient = p.backoffCoefficient ?? RETRY_DEFAULTS.backoffCoefficient;
    const maximumAttempts = p.maximumAttempts ?? RETRY_DEFAULTS.maximumAttempts;
    if (maximumIntervalMs < initialIntervalMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['maximumIntervalMs'],
        message: `must be ≥ initialIntervalMs (${initialIntervalMs} ms), got ${maximumIntervalMs} ms`,
      });
    }
    // The delay is computed in SQL (float8) by the claim and failure statements, which serve every step of a
    // queue. They cap it at maximumIntervalMs without overflowing, but a coefficient so large that even the first
    // growth step is not a number says the policy is a mistake: refuse it here, where it is written.
    if (!Number.isFinite(initialIntervalMs * backoffCoefficient)) {
      ctx.addIssue({
        code: 'custom',
        path: ['backoffCoefficient'],
        message: `initialIntervalMs × backoffCoefficient = ${initialIntervalMs} × ${backoffCoefficient} overflows`,
      });
    }
    return Object.freeze({
      initialIntervalMs,
      backoffCoefficient,
      maximumIntervalMs,
      maximumAttempts,
      nonRetryableErrorTypes: Object.freeze([...(p.nonRetryableErrorTypes ?? [])]),
      jitter: p.jitter ?? RETRY_DEFAULTS.jitter,
    });
  });

/**
 * Validate a retry policy and fill its defaults.
 * @param where names the owner in error messages, e.g. `activity charge retry`.
 * @throws InvalidOptionsError naming each bad field.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function resolveRetryPolicy(
  policy: RetryPolicy | undefined,
  where = 'retry policy',
): ResolvedRetryPolicy {
  return parseOptions(retryPolicySchema, policy ?? {}, where);
}

/**
 * Merge a per-call override onto a base policy (fields of `override` win), then resolve. Overriding
 * `initialIntervalMs` alone resets `maximumIntervalMs` to its default (100 × the new initial interval).
 * @throws InvalidOptionsError naming each bad field.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function mergeRetryPolicy(
  base: ResolvedRetryPolicy,
  override: RetryPolicy | undefined,
  where?: string,
): ResolvedRetryPolicy {
  if (override === undefined) return base;
  // A new initial interval without a new maximum takes the default maximum (100 × initial) rather than the
  // base's, which was derived from the base's initial interval.
  const maximumIntervalMs =
    override.maximumIntervalMs ??
    (override.initialIntervalMs !== undefined ? undefined : base.maximumIntervalMs);
  return resolveRetryPolicy({ ...base, ...override, maximumIntervalMs }, where);
}

/**
 * Decide whether a failed attempt may be retried: not when the failure is non-retryable, its type is listed
 * in `nonRetryableErrorTypes`, or `attempt` (1-based, the attempt that failed) used up `maximumAttempts`.
 * The delay itself is computed in SQL when the failure is recorded, so it is persisted with the step.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function retryDecision(
  policy: ResolvedRetryPolicy,
  failure: SerializedFailure,
  attempt: number,
): { retry: true } | { retry: false; reason: 'non-retryable' | 'attempts-exhausted' } {
  if (failure.nonRetryable || policy.nonRetryableErrorTypes.includes(failure.type)) {
    return { retry: false, reason: 'non-retryable' };
  }
  if (attempt >= policy.maximumAttempts) return { retry: false, reason: 'attempts-exhausted' };
  return { retry: true };
}
