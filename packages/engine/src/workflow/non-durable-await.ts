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
  if (activeTurns++ === 0) hook.enable();
  let ended = false;
  storage.run(sink, fn);
  return {
    end() {
      if (ended) return;
      ended = true;
      if (--activeTurns === 0) hook.disable();
    },
  };
}
