import { z } from 'zod';

/**
 * Instants (points in time) the engine stores, as `timestamptz`: a `startAt`, a `sleepUntil` date, the range of a
 * schedule's backfill. JavaScript dates reach ±275,760 years and PostgreSQL's `timestamptz` from 4713 BC to
 * 294276 AD, so the ends of either range fail in the database, or in the arithmetic before it; every instant is
 * checked here instead, at the door, against the years 0001 to 9999 (what ISO 8601 writes in four digits).
 * @module
 */

/** The earliest instant the engine takes: 0001-01-01T00:00:00.000Z, in ms since the epoch. */
export const MIN_INSTANT_MS = -62_135_596_800_000;

/** The latest instant the engine takes: 9999-12-31T23:59:59.999Z, in ms since the epoch. */
export const MAX_INSTANT_MS = 253_402_300_799_999;

/**
 * Why `ms` (ms since the epoch) is not an instant the engine takes, or undefined when it is one: a number that
 * is not finite (an Invalid Date), or a time outside the years 0001 to 9999.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function instantProblem(ms: number): string | undefined {
  if (!Number.isFinite(ms)) return 'must be a valid Date, not an Invalid Date';
  if (ms < MIN_INSTANT_MS || ms > MAX_INSTANT_MS) {
    return 'must be a time between the years 0001 and 9999 (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z)';
  }
  return undefined;
}

/**
 * zod schema of a `Date` option the engine stores: a valid Date within {@link instantProblem}'s range.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const instantSchema = z.instanceof(Date, { message: 'must be a Date' }).superRefine((d, ctx) => {
  const problem = instantProblem(d.getTime());
  if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
});
