/**
 * The test suite's waits, in one place. Two kinds, named for what they do:
 *
 * - {@link checkOnEvents}: re-check a condition after each `turn:committed`, `attempt:completed` or
 *   `attempt:failed` of the given workers (no sleeping): the wait for anything a worker's event announces;
 * - {@link pollFor} and {@link pollUntil}: read the database on a timer, for state no event announces (a backend
 *   waiting on a lock, rows a separate process writes). Bounded; never a wait for an outcome the engine reports as
 *   an event.
 */
import type { Worker } from '@palisade/engine';

/** Anything else {@link checkOnEvents} may listen to: a test's own emitter of the same event names. */
export interface EventSource {
  readonly events: {
    on(name: 'turn:committed' | 'attempt:completed' | 'attempt:failed', listener: () => void): unknown;
    off(name: 'turn:committed' | 'attempt:completed' | 'attempt:failed', listener: () => void): unknown;
  };
}

/**
 * Resolve once `check()` holds: checked now and again after every `turn:committed`, `attempt:completed` or
 * `attempt:failed` of the given workers (no sleeping); reject after `timeoutMs` (default 20 s) with an error that
 * names `what`.
 */
export function checkOnEvents(
  workers: readonly (Worker | EventSource)[],
  check: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const names = ['turn:committed', 'attempt:completed', 'attempt:failed'] as const;
  return new Promise<void>((resolve, reject) => {
    let done = false;
    let checking = false;
    let again = false;
    const finish = (error?: unknown) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      for (const w of workers) for (const n of names) w.events.off(n, onEvent);
      if (error === undefined) resolve();
      else reject(error instanceof Error ? error : new Error(JSON.stringify(error)));
    };
    const timer = setTimeout(
      () => finish(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
      timeoutMs,
    );
    const run = async () => {
      if (checking) {
        again = true;
        return;
      }
      checking = true;
      try {
        do {
          again = false;
          if (await check()) return finish();
        } while (again && !done);
      } catch (error) {
        finish(error);
      } finally {
        checking = false;
      }
    };
    function onEvent(): void {
      void run();
    }
    for (const w of workers) for (const n of names) w.events.on(n, onEvent);
    void run();
  });
}

/**
 * Call `read` every `intervalMs` (default 50) until `done(value)` holds, and return that value; throws after
 * `timeoutMs` (default 10 s) with an error that names `what` and the last value read.
 */
export async function pollUntil<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  {
    timeoutMs = 10_000,
    what = 'condition',
    intervalMs = 50,
  }: { timeoutMs?: number; what?: string; intervalMs?: number } = {},
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (performance.now() > deadline) {
      throw new Error(`${what} not reached within ${timeoutMs} ms; last value: ${JSON.stringify(value)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Call `probe` every 20 ms until it returns a value other than undefined, and return that value; throws after
 * `timeoutMs` (default 10 s) with an error that names `what`.
 */
export async function pollFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  timeoutMs = 10_000,
): Promise<T> {
  let found: T | undefined;
  await pollUntil(
    async () => (found = await probe()),
    (value) => value !== undefined,
    { timeoutMs, what, intervalMs: 20 },
  );
  return found as T;
}
