/**
 * The worker's {@link TurnHost} for Node: the async hook that catches workflow code awaiting timers or I/O, the
 * deterministic `Date`/`Math.random` installed while turns run, and the drain of the microtask queue.
 */
import { AsyncLocalStorage, createHook, type AsyncHook } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { promiseHooks } from 'node:v8';
import type { TurnHost, TurnSink } from '../turn/host.js';
import { uuid7 } from '../turn/uuid7.js';

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

/** The process's own `Math.random`, `Date.now` and `Date` (the host's `random()` draws from the first). */
const originalRandom: () => number = Math.random;
const originalDateNow: () => number = Date.now;
const OriginalDate: DateConstructor = Date;

/*
 * Deterministic time and randomness in workflow code (issue 26), as Temporal gives them: installed as the globals
 * only while a turn runs (see trackNonDurable), they ask the async context whose code is calling. Workflow code
 * runs in the async context of its turn's sink (its start, and every continuation of its awaits, carry it), so its
 * `Date.now()`, `new Date()` and `Math.random()` read the run's own clock and generator, the same on every
 * replay; any other code of the process — activities, the engine, other libraries, the turns of other runs —
 * runs outside that context (or in its own run's) and gets the real clock and `Math.random`, with one
 * `getStore()` more. What does not hold: a value the code captured before (`const now = Date.now` at module
 * load) is the real function; a timer or I/O callback the code started (refused anyway: NON_DURABLE_AWAIT) runs
 * in its context too. Replacing `Date` keeps `instanceof Date` true for every date (the replacement shares
 * `Date.prototype`), but `date.constructor === Date` is false while turns run.
 */
function workflowRandom(): number {
  const sink = storage.getStore();
  return sink?.random ? sink.random() : originalRandom();
}
function workflowDateNow(): number {
  const sink = storage.getStore();
  return sink?.clockMs ? sink.clockMs() : originalDateNow();
}
Object.defineProperty(workflowRandom, 'name', { value: 'random' });
Object.defineProperty(workflowDateNow, 'name', { value: 'now' });

/**
 * `Date` while turns run: `new Date()` and `Date()` with no argument read {@link workflowDateNow}; anything else
 * is the original constructor's (subclasses included: `new.target` is passed on).
 */
const WorkflowDate = function Date(this: unknown, ...args: unknown[]): unknown {
  if (new.target === undefined) {
    return args.length === 0 && storage.getStore()?.clockMs
      ? new OriginalDate(workflowDateNow()).toString()
      : OriginalDate();
  }
  const given = args.length === 0 && storage.getStore()?.clockMs ? [workflowDateNow()] : args;
  return Reflect.construct(OriginalDate, given, new.target) as unknown;
} as unknown as DateConstructor;
Object.defineProperty(WorkflowDate, 'prototype', { value: OriginalDate.prototype });
Object.defineProperty(WorkflowDate, 'length', { value: OriginalDate.length });
Object.assign(WorkflowDate, { now: workflowDateNow, parse: OriginalDate.parse, UTC: OriginalDate.UTC });

const storage = new AsyncLocalStorage<TurnSink>();
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
export function trackNonDurable(sink: TurnSink, fn: () => void): { end(): void } {
  if (activeTurns++ === 0) {
    hook.enable();
    // Each returns a function (typed `Function` by @types/node) that removes the hook.
    stopCounting = [promiseHooks.onBefore(countActivity)].map((stop) => stop as () => void);
    Math.random = workflowRandom;
    Date.now = workflowDateNow;
    globalThis.Date = WorkflowDate;
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
        if (Math.random === workflowRandom) Math.random = originalRandom;
        if (globalThis.Date === WorkflowDate) globalThis.Date = OriginalDate;
        if (OriginalDate.now === workflowDateNow) OriginalDate.now = originalDateNow;
      }
    },
  };
}

/** What a turn needs of this process ({@link TurnHost}), as the worker hands it to every turn it runs. */
export const nodeTurnHost: TurnHost = Object.freeze({
  track: trackNonDurable,
  settleMicrotasks,
  macrotask: () => new Promise<void>((resolve) => setImmediate(resolve)),
  random: () => originalRandom(),
  randomUUID: () => randomUUID(),
  uuid7,
});
