/**
 * What a turn needs of the process it runs in, passed in by the worker (`TurnInput.host`) so that the turn itself
 * stays pure: the tracking that catches workflow code awaiting timers or I/O and gives it a deterministic clock
 * and `Math.random`, the drain of the microtask queue between deliveries, and fresh random values for the calls
 * that record them. The worker's implementation, for Node, is `worker/non-durable-await.ts`.
 */

/**
 * Where the host reports what workflow code did, and asks the turn for the code's clock and random numbers: the
 * turn's side of {@link TurnHost.track}.
 */
export interface TurnSink {
  /** The code started a timer or I/O (`type`: the async resource's kind, e.g. `Timeout`, `TCPWRAP`). */
  reportNonDurable(type: string): void;
  /** The code scheduled work on `process.nextTick` or `queueMicrotask`: its drains also take an event-loop turn. */
  reportOtherQueue?(type: string): void;
  /** The workflow's clock (whole epoch ms): what `Date.now()` and `new Date()` read in workflow code. */
  clockMs?(): number;
  /** The workflow's seeded random numbers in [0, 1): what `Math.random()` returns in workflow code. */
  random?(): number;
}

/** The process services a turn runs with. Every member must be safe to call while several turns run at once. */
export interface TurnHost {
  /**
   * Run `fn` (workflow code) so that what it does, now or in its continuations, reaches `sink`, until the
   * returned `end()` is called (when the turn is over; idempotent).
   */
  track(sink: TurnSink, fn: () => void): { end(): void };
  /**
   * Resolves once the microtask queue holds nothing more of the workflow code's (what a delivered outcome set off
   * has run until the code blocks again), ideally without an event-loop turn.
   */
  settleMicrotasks(): Promise<void>;
  /** Resolves after one turn of the event loop (`setImmediate`). */
  macrotask(): Promise<void>;
  /** A fresh random number in [0, 1) from the process's own generator (`ctx.random()` records it). */
  random(): number;
  /** A fresh random UUID, RFC 4122 version 4 (`ctx.uuid()` records it). */
  randomUUID(): string;
  /** A new time-ordered UUIDv7, greater than the host's earlier ones (a child run's id: a key; see `uuid7.ts`). */
  uuid7(): string;
}
