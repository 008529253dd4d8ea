import { z } from 'zod';
import type { Duration } from './duration.js';
import { durationMs } from './duration.js';
import { textProblem } from './json-value.js';

/**
 * A per-key concurrency limit (`concurrency` on `client.start`, `client.enqueue` and `ctx.run`): at most `limit`
 * runs of that workflow, or attempts of that activity, with this `key` are running at once; the others wait,
 * without holding back work of other keys. A key is scoped to the workflow or activity it is given for. Enforced
 * by the claim statement, so no race lets `limit + 1` run.
 *
 * What counts as running: an activity step from its claim until its attempt ends (a failed attempt waiting for
 * its retry does not hold a place; one whose lease expired does, until it is reclaimed or ended); a workflow run
 * from its first turn until it ends, sleeps and signal waits included.
 */
export interface ConcurrencyLimit {
  /** 1–512 characters of storable text, e.g. a customer or tenant id. */
  readonly key: string;
  /** Whole number, 1–10,000. */
  readonly limit: number;
}

/**
 * A per-key rate limit on the starts of an activity (`rateLimit` on `defineActivity`, `client.enqueue` and
 * `ctx.run`): at most `limit` attempts of that activity with this `key` are claimed within any window of
 * `periodMs`, judged by the database clock. A step over the limit waits until the window has room, without
 * holding back other keys. Every attempt counts, retries included. A key is scoped to the activity.
 */
export interface RateLimit {
  /** 1–512 characters of storable text. @defaultValue `''`: one limit for every call of the activity */
  readonly key?: string;
  /** Whole number, 1–10,000. */
  readonly limit: number;
  /** The window, e.g. `'1s'` or `60_000` (ms); 1 ms to 1 day. */
  readonly periodMs: Duration;
}

/**
 * A {@link RateLimit} resolved: the period in ms and the key filled in.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export interface ResolvedRateLimit {
  readonly key: string;
  readonly limit: number;
  readonly periodMs: number;
}

const flowKey = z
  .string()
  .min(1, 'must not be empty')
  .max(512, 'must be at most 512 characters')
  .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)');

const flowLimit = z
  .number()
  .int('must be a whole number')
  .min(1, 'must be ≥ 1')
  .max(10_000, 'must be ≤ 10,000');

/**
 * zod schema of a {@link ConcurrencyLimit} option.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const concurrencyLimitSchema = z.object({ key: flowKey, limit: flowLimit }).strict();

/**
 * zod schema of a {@link RateLimit} option; parses to a {@link ResolvedRateLimit}.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const rateLimitSchema = z
  .object({
    key: z.union([flowKey, z.literal('')]).optional(),
    limit: flowLimit,
    periodMs: durationMs.pipe(z.number().min(1, 'must be ≥ 1 ms').max(86_400_000, 'must be ≤ 1 day')),
  })
  .strict()
  .transform((r): ResolvedRateLimit => ({ key: r.key ?? '', limit: r.limit, periodMs: r.periodMs }));
