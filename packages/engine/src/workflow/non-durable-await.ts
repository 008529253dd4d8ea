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
let hook: AsyncHook | undefined;

function ensureHook(): void {
  if (hook) return;
  hook = createHook({
    init(_asyncId, type) {
      if (!NON_DURABLE_TYPES.has(type)) return;
      storage.getStore()?.reportNonDurable(type);
    },
  });
  hook.enable();
}

/** Run `fn` (workflow code) so that timers and I/O it starts, now or in its continuations, reach `sink`. */
export function trackNonDurable<T>(sink: NonDurableSink, fn: () => T): T {
  ensureHook();
  return storage.run(sink, fn);
}

/** Run `fn` outside any turn's tracking (engine code called from workflow code, e.g. scheduling). */
export function untracked<T>(fn: () => T): T {
  return storage.exit(fn);
}
