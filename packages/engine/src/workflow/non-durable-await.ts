import { AsyncLocalStorage, createHook, type AsyncHook } from 'node:async_hooks';

/**
 * Detects workflow code that starts timers or I/O — anything it could await that is not a durable primitive
 * (DESIGN.md §5). Workflow code runs inside `track(turn, fn)`; the async hook sees every async resource
 * created while it (or a continuation of it) runs, and reports those of the kinds below to the turn. Promise
 * creation itself is allowed (durable primitives are promises); so are writes to stdout/stderr (logging).
 */
const NON_DURABLE_TYPES = new Set([
  'Timeout',
  'Immediate',
  'FSREQCALLBACK',
  'FSREQPROMISE',
  'FILEHANDLE',
  'TCPWRAP',
  'TCPCONNECTWRAP',
  'PIPECONNECTWRAP',
  'UDPWRAP',
  'GETADDRINFOREQWRAP',
  'GETNAMEINFOREQWRAP',
  'QUERYWRAP',
  'HTTPCLIENTREQUEST',
  'HTTPINCOMINGMESSAGE',
  'PROCESSWRAP',
  'ZLIB',
  'WORKER',
]);

/** Receives the first non-durable resource a turn created. */
export interface NonDurableSink {
  reportNonDurable(type: string): void;
  /** Workflow code called `Math.random()` or `Date.now()`: values that differ on replay (not an await). */
  reportNondeterministic?(call: string): void;
}

/** The process's own `Math.random` and `Date.now`, for engine code that needs them while a turn runs. */
export const originalRandom: () => number = Math.random;
const originalDateNow: () => number = Date.now;

/**
 * Installed only while a turn runs: outside workflow code (no sink in the async context) they are the originals
 * with one `getStore()` more. `new Date()` cannot be caught this way (replacing the `Date` constructor would break
 * `instanceof Date` for values made before); it is documented instead.
 */
function watchedRandom(): number {
  storage.getStore()?.reportNondeterministic?.('Math.random()');
  return originalRandom();
}
function watchedDateNow(): number {
  storage.getStore()?.reportNondeterministic?.('Date.now()');
  return originalDateNow();
}

const storage = new AsyncLocalStorage<NonDurableSink>();
const hook: AsyncHook = createHook({
  init(_asyncId, type) {
    if (!NON_DURABLE_TYPES.has(type)) return;
    storage.getStore()?.reportNonDurable(type);
  },
});
/** Turns in progress; the hook (which slows every promise in the process) is enabled only while > 0. */
let activeTurns = 0;

/**
 * Run `fn` (workflow code) so that timers and I/O it starts, now or in its continuations, reach `sink`, until
 * the returned `end()` is called (when the turn is over).
 */
export function trackNonDurable(sink: NonDurableSink, fn: () => void): { end(): void } {
  if (activeTurns++ === 0) {
    hook.enable();
    Math.random = watchedRandom;
    Date.now = watchedDateNow;
  }
  let ended = false;
  storage.run(sink, fn);
  return {
    end() {
      if (ended) return;
      ended = true;
      if (--activeTurns === 0) {
        hook.disable();
        // Restore only what is still ours (someone may have replaced it since, e.g. a fake-timer library).
        if (Math.random === watchedRandom) Math.random = originalRandom;
        if (Date.now === watchedDateNow) Date.now = originalDateNow;
      }
    },
  };
}
