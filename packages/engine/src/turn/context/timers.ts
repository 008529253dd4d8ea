/** `ctx.sleep(duration)` and `ctx.sleepUntil(date)`: durable timers, fired by the DB clock. */
import { InvalidOptionsError, MAX_SLEEP_MS, type Duration } from '@palisade/sdk';
import { instantProblem, toMs } from '@palisade/sdk/internal';
import type { ReplayState } from '../replay-state.js';

/**
 * `ctx.sleep`: resolves once `duration` (ms or a `'5m'`-style string, at most {@link MAX_SLEEP_MS}) has passed by
 * the DB clock, counted from the commit of the turn that scheduled it. A bad duration throws at the call.
 */
export function sleep(state: ReplayState, duration: Duration): Promise<void> {
  const delayMs = toMs(duration, `ctx.sleep duration in workflow ${state.workflowName}`, MAX_SLEEP_MS);
  return state.durable<void>('timer', 'sleep', (seq) => ({ seq, kind: 'timer', name: 'sleep', delayMs }));
}

/**
 * `ctx.sleepUntil`: resolves once the DB clock reaches `date`. Anything but a valid `Date` in the storable range
 * throws {@link InvalidOptionsError} at the call, naming what it got.
 */
export function sleepUntil(state: ReplayState, date: Date): Promise<void> {
  const where = `ctx.sleepUntil in workflow ${state.workflowName}`;
  const dueAtMs = date instanceof Date ? date.getTime() : Number.NaN;
  if (Number.isFinite(dueAtMs) && instantProblem(dueAtMs) !== undefined) {
    throw new InvalidOptionsError(where, [{ path: 'date', message: instantProblem(dueAtMs) as string }]);
  }
  if (!Number.isFinite(dueAtMs)) {
    const given = date as unknown;
    const got =
      given instanceof Date
        ? 'an invalid Date'
        : typeof given === 'string'
          ? `the string ${JSON.stringify(given.slice(0, 40))}`
          : typeof given;
    throw new InvalidOptionsError(where, [
      { path: 'date', message: `must be a valid Date, got ${got} (use new Date(...) around a string)` },
    ]);
  }
  return state.durable<void>('timer', 'sleep', (seq) => ({ seq, kind: 'timer', name: 'sleep', dueAtMs }));
}
