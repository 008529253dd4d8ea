/**
 * Test-only helpers: time travel on the database clock and timings below the production floors.
 * Never import this from production code.
 * @module
 */
import type { WorkerOptions } from '../options.js';
import { faultHooks, type FaultHooks, type FaultPoint } from '../internal/fault-points.js';
import { UNSAFE_TEST_TIMINGS } from '../internal/unsafe-timings.js';

export { advanceClock, databaseNow, resetClock, setClockOffset } from './time-travel.js';

/**
 * Mark worker options so that leases down to 100 ms (instead of 3 s) and matching heartbeat settings are
 * accepted — for tests that exercise lease expiry with real time. The other checks still apply.
 */
export function unsafeTestTimings<T extends WorkerOptions>(options: T): T {
  return { ...options, [UNSAFE_TEST_TIMINGS]: true };
}

export type { CompletionAnswer, FaultHooks, FaultPoint, TurnFault } from '../internal/fault-points.js';

/**
 * Attach `hook` to an engine fault point in this process, or detach it with `undefined` — for fault-injection
 * tests that must stop the engine at a precise moment (e.g. SIGSTOP between a fenced transaction's fence and
 * its COMMIT). The hook is awaited in place; while it runs the engine waits exactly as it would for a slow
 * statement. Never set one in production.
 */
export function setFaultHook<P extends FaultPoint>(point: P, hook: FaultHooks[P] | undefined): void {
  if (hook === undefined) delete faultHooks[point];
  else faultHooks[point] = hook;
}
