import { AsyncLocalStorage, createHook, type AsyncHook } from 'node:async_hooks';
import { promiseHooks } from 'node:v8';

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

/**
 * Queues of deferred work besides promise reactions (`process.nextTick`, `queueMicrotask`): allowed in workflow
 * code, but invisible to {@link settleMicrotasks}, so a turn whose code used one drains with an event-loop turn.
 */
const OTHER_QUEUE_TYPES = new Set(['TickObject', 'Microtask']);

/** Receives the first non-durable resource a turn created. */
export interface NonDurableSink {
  reportNonDurable(type: string): void;
  /** Workflow code scheduled work on `process.nextTick` or `queueMicrotask` ({@link OTHER_QUEUE_TYPES}). */
  reportOtherQueue?(type: string): void;
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
    if (NON_DURABLE_TYPES.has(type)) storage.getStore()?.reportNonDurable(type);
    else if (OTHER_QUEUE_TYPES.has(type)) storage.getStore()?.reportOtherQueue?.(type);
  },
});

/**
 * Promise reactions run while a turn runs (an `await` resuming, a `then` callback: V8's `before` promise hook).
 * {@link settleMicrotasks} watches it to tell when the microtask queue holds nothing more of the code's.
 */
let promiseActivity = 0;
const countActivity = (): void => {
  promiseActivity++;
};
let stopCounting: (() => void)[] = [];

/** Quiet microtask hops in a row after which the code is taken to be blocked (see {@link settleMicrotasks}). */
const QUIET_HOPS = 2;
/** Hops after which a drain gives up on the microtask queue and waits for an event-loop turn instead. */
const MAX_HOPS = 10_000;
/** Hops made by all drains so far (each one reaction: the drain resuming). */
let drainHops = 0;

/**
 * Resolves once the microtask queue holds nothing of the workflow code's: what a delivered outcome set off has
 * run to the point where the code blocks again, without an event-loop turn (issue 12: replaying n outcomes must
 * not take n event-loop turns, each of which waits behind the worker's other I/O). It hops through the microtask
 * queue (`await` of a resolved promise: its resumption is the one reaction a hop adds) until {@link QUIET_HOPS}
 * hops in a row saw no reaction run but the hops of drains (this one's, and those of turns run at the same time): every job queued before a hop runs before it, and the only job of the
 * code's that runs no reaction (a thenable's resolution job) queues the reaction that does, hence two quiet hops,
 * not one. Work queued by `process.nextTick` or `queueMicrotask` is not seen here: a turn whose code used them
 * (reported through `reportOtherQueue`) also waits for an event-loop turn. The code's own jobs run in the order a
 * drain by `setImmediate` gives (the hops only interleave with them): microtask-drain.test.ts beside this file
 * compares the two on generated programs. Outside a tracked turn ({@link trackNonDurable}), and after
 * {@link MAX_HOPS} hops, it waits for an event-loop turn instead.
 */
export async function settleMicrotasks(): Promise<void> {
  // Nothing counts reactions outside a tracked turn: only an event-loop turn is sure to drain the queue.
  if (activeTurns === 0) return new Promise((resolve) => setImmediate(resolve));
  let last = promiseActivity;
  let lastHops = drainHops;
  let quiet = 0;
  for (let hops = 0; hops < MAX_HOPS; hops++) {
    await Promise.resolve();
    // The hops of every drain in progress (this one's and those of other turns running at the same time) are
    // reactions too, one each; any other reaction means that some code ran.
    drainHops++;
    const others = promiseActivity - last - (drainHops - lastHops);
    last = promiseActivity;
    lastHops = drainHops;
    if (others > 0) quiet = 0;
    else if (++quiet >= QUIET_HOPS) return;
  }
  await new Promise((resolve) => setImmediate(resolve));
}

/** Turns in progress; the hook (which slows every promise in the process) is enabled only while > 0. */
let activeTurns = 0;

/**
 * Run `fn` (workflow code) so that timers and I/O it starts, now or in its continuations, reach `sink`, until
 * the returned `end()` is called (when the turn is over).
 */
export function trackNonDurable(sink: NonDurableSink, fn: () => void): { end(): void } {
  if (activeTurns++ === 0) {
    hook.enable();
    // Each returns a function (typed `Function` by @types/node) that removes the hook.
    stopCounting = [promiseHooks.onBefore(countActivity)].map((stop) => stop as () => void);
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
        for (const stop of stopCounting.splice(0)) stop();
        // Restore only what is still ours (someone may have replaced it since, e.g. a fake-timer library).
        if (Math.random === watchedRandom) Math.random = originalRandom;
        if (Date.now === watchedDateNow) Date.now = originalDateNow;
      }
    },
  };
}
