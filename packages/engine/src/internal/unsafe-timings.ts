/**
 * Marker that lets tests run with lease and heartbeat timings below the production floors. Set only through
 * `unsafeTestTimings()` from `@palisade/engine/testing`; never read from user-facing option types.
 */
export const UNSAFE_TEST_TIMINGS: unique symbol = Symbol.for('palisade.unsafeTestTimings');

/** Lease floor outside tests (DESIGN.md §4 invariant 9). */
export const MIN_LEASE_MS = 3_000;
/** Lease floor under `unsafeTestTimings()`. */
export const MIN_TEST_LEASE_MS = 100;

export function allowsUnsafeTimings(options: object): boolean {
  return (options as { [UNSAFE_TEST_TIMINGS]?: unknown })[UNSAFE_TEST_TIMINGS] === true;
}
