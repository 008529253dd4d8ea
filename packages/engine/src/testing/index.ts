/**
 * Test-only helpers: time travel on the database clock and timings below the production floors.
 * Never import this from production code.
 * @module
 */
import type { WorkerOptions } from '../options.js';
import { UNSAFE_TEST_TIMINGS } from '../internal/unsafe-timings.js';

export { advanceClock, databaseNow, resetClock, setClockOffset } from './time-travel.js';

/**
 * Mark worker options so that leases down to 100 ms (instead of 3 s) and matching heartbeat settings are
 * accepted — for tests that exercise lease expiry with real time. The other checks still apply.
 */
export function unsafeTestTimings<T extends WorkerOptions>(options: T): T {
  return { ...options, [UNSAFE_TEST_TIMINGS]: true };
}
