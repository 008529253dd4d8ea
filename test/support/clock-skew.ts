/**
 * A preload for worker processes (`node --import <this file>`, after the tsx loader) that gives the process a
 * wrong clock, standing in for libfaketime (not installed here, and it would not reach libuv's monotonic clock
 * anyway): research/fencing-semantics.md §3.3 T9. Configured by two environment variables that
 * ./worker-process.ts sets from `spawnWorkerProcess(…, { clock })`:
 *
 * - `PALISADE_TEST_CLOCK_OFFSET_MS`: `Date.now()` and `new Date()` (no arguments) read the host clock plus this
 *   offset. `Date(...)` called as a function is shifted too; dates built from a value are left alone.
 * - `PALISADE_TEST_CLOCK_RATE`: `performance.now()` runs at this rate relative to real time (1.01: 1 % fast),
 *   from the moment the preload ran. This is the clock the engine's local lease deadline reads.
 *
 * Only user-land code sees the change: Node's internals captured the real `Date` and their own monotonic clock
 * at startup (timers, `setTimeout` durations and libuv keep real time, as a slow or fast *clock* would not slow
 * the *CPU*). `process.hrtime` is left alone (the engine does not read it).
 */
const offsetMs = Number(process.env.PALISADE_TEST_CLOCK_OFFSET_MS ?? 0);
const rate = Number(process.env.PALISADE_TEST_CLOCK_RATE ?? 1);
if (!Number.isFinite(offsetMs) || !Number.isFinite(rate) || rate <= 0) {
  throw new Error(`clock-skew preload: bad offset ${offsetMs} or rate ${rate}`);
}

if (offsetMs !== 0) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  const skewedNow = (): number => realNow() + offsetMs;
  globalThis.Date = new Proxy(RealDate, {
    construct(target, args: unknown[], newTarget: DateConstructor): Date {
      return Reflect.construct(target, args.length === 0 ? [skewedNow()] : args, newTarget) as Date;
    },
    apply() {
      return new RealDate(skewedNow()).toString();
    },
    get(target, property, receiver: unknown) {
      if (property === 'now') return skewedNow;
      return Reflect.get(target, property, receiver) as unknown;
    },
  });
}

if (rate !== 1) {
  const realPerformanceNow = performance.now.bind(performance);
  const originMs = realPerformanceNow();
  Object.defineProperty(performance, 'now', {
    value: (): number => originMs + (realPerformanceNow() - originMs) * rate,
    configurable: true,
    writable: true,
  });
}

export {};
