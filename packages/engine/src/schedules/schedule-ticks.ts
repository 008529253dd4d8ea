/**
 * Tick arithmetic of schedules, with no database: which ticks of a schedule are due at a given database time,
 * under its catch-up policy, and which tick comes next. Every time here is in ms since the Unix epoch by the
 * database clock (the caller reads `<schema>.now()`; never the worker's clock). Cron expressions, time zones and
 * DST come from croner; interval schedules tick at whole multiples of their interval since the epoch.
 *
 * Nothing here enumerates missed ticks one by one beyond a small bound: `none` and `latest` find the latest due
 * tick with one backward search (croner's `previousRuns(1, …)`, or a division), whatever the downtime, and `all`
 * walks at most {@link MAX_CATCHUP_TICKS} ticks of its window per evaluation.
 * @module
 */
import { Cron } from 'croner';

/** When a schedule ticks: a cron expression read in an IANA time zone, or a fixed interval. */
export type TickSpec =
  | { readonly kind: 'cron'; readonly cron: string; readonly timezone: string }
  | { readonly kind: 'every'; readonly everyMs: number };

/**
 * What happens to ticks that fell due while no evaluator ran (downtime, or a schedule whose evaluation lagged
 * past its next tick):
 * - `none`: missed ticks are skipped. A tick fires only when it is the only due tick and at most
 *   {@link ON_TIME_MS} late; otherwise nothing fires and the schedule waits for its next future tick.
 * - `latest`: only the most recent due tick fires, however late (one run after any downtime).
 * - `all`: every due tick at most `windowMs` old fires, oldest first, at most {@link MAX_CATCHUP_TICKS} per
 *   evaluation (the next evaluation goes on from the first tick not yet fired); older ones are skipped.
 */
export type CatchupPolicy =
  | { readonly kind: 'none' }
  | { readonly kind: 'latest' }
  | { readonly kind: 'all'; readonly windowMs: number };

/** How late a tick may be and still fire under catch-up `none` (ms). */
export const ON_TIME_MS = 60_000;

/** Most ticks of one schedule that one evaluation fires under catch-up `all`. */
export const MAX_CATCHUP_TICKS = 100;

/** Most ticks one backfill may name. */
export const MAX_BACKFILL_TICKS = 1_000;

/** One croner instance per (expression, zone): parsing is the costly part, and evaluators see the same few. */
const crons = new Map<string, Cron>();
const MAX_CACHED_CRONS = 10_000;

/** The nicknames croner reads as cron patterns (`@daily` is `0 0 * * *`); not `@reboot`, which is no time. */
const CRON_NICKNAMES = /^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$/i;

/**
 * Why `cron` is not a cron pattern, or undefined when it is one: five fields (minute … weekday), six (seconds
 * first), or a nickname. Croner also takes a date (an ISO 8601 string) as a one-off run, and seven fields (a
 * year): a schedule takes neither — a date ticks once, and is never due again after it.
 */
export function cronPatternProblem(cron: string): string | undefined {
  const text = cron.trim();
  if (CRON_NICKNAMES.test(text)) return undefined;
  const fields = text.split(/\s+/).length;
  if (fields === 5 || fields === 6) return undefined;
  return (
    `not a cron pattern (${fields} field${fields === 1 ? '' : 's'}): give five fields ` +
    "(minute hour day-of-month month weekday, e.g. '30 2 * * *'), six with seconds first, or a nickname ('@daily')"
  );
}

/**
 * The croner job of `cron` in `timezone` (paused: it never runs anything, it only computes times).
 * @throws Error when `cron` is not a cron pattern ({@link cronPatternProblem}); RangeError or TypeError from
 * croner when the pattern is not valid.
 */
export function cronOf(cron: string, timezone: string): Cron {
  const key = `${timezone}\u0000${cron}`;
  let job = crons.get(key);
  if (!job) {
    const problem = cronPatternProblem(cron);
    if (problem !== undefined) throw new Error(problem);
    job = new Cron(cron, { paused: true, timezone });
    if (crons.size >= MAX_CACHED_CRONS) crons.clear();
    crons.set(key, job);
  }
  return job;
}

/** Whether `timezone` is an IANA time zone this runtime knows (`Intl`'s check, which croner relies on). */
export function isKnownTimezone(timezone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    return true;
  } catch {
    return false;
  }
}

/** The first tick strictly after `afterMs`. @throws Error when a cron expression never ticks again. */
export function nextTickAfter(spec: TickSpec, afterMs: number): number {
  if (spec.kind === 'every') return (Math.floor(afterMs / spec.everyMs) + 1) * spec.everyMs;
  const next = cronOf(spec.cron, spec.timezone).nextRun(new Date(afterMs));
  if (!next)
    throw new Error(`cron expression "${spec.cron}" has no tick after ${new Date(afterMs).toISOString()}`);
  return next.getTime();
}

/** The latest tick at or before `atMs`, or undefined when there is none (a cron that never ticked before). */
export function latestTickAtOrBefore(spec: TickSpec, atMs: number): number | undefined {
  if (spec.kind === 'every') return Math.floor(atMs / spec.everyMs) * spec.everyMs;
  // previousRuns is exclusive of its reference: 1 ms later includes a tick exactly at `atMs`.
  return cronOf(spec.cron, spec.timezone)
    .previousRuns(1, new Date(atMs + 1))[0]
    ?.getTime();
}

/** What one evaluation of a due schedule does: the ticks to fire, oldest first, and the schedule's next tick. */
export interface DueTicks {
  readonly ticks: readonly number[];
  /** The first tick not fired and not skipped: after `nowMs`, except when `all` stopped at its bound. */
  readonly nextTickMs: number;
}

/**
 * The ticks to fire for a schedule whose next unfired tick is `nextTickMs` (≤ `nowMs`), at database time `nowMs`,
 * under `catchup` (see {@link CatchupPolicy}), and the tick the schedule waits for afterwards. Bounded work
 * whatever the gap between `nextTickMs` and `nowMs`.
 */
export function dueTicks(
  spec: TickSpec,
  catchup: CatchupPolicy,
  nextTickMs: number,
  nowMs: number,
): DueTicks {
  if (nextTickMs > nowMs) return { ticks: [], nextTickMs };
  const latest = Math.max(latestTickAtOrBefore(spec, nowMs) ?? nextTickMs, nextTickMs);
  const after = nextTickAfter(spec, latest);
  switch (catchup.kind) {
    case 'none':
      // Missed: a later tick was already due when this one was evaluated, or it is too late to count as on time.
      return {
        ticks: latest === nextTickMs && nowMs - latest <= ON_TIME_MS ? [latest] : [],
        nextTickMs: after,
      };
    case 'latest':
      return { ticks: [latest], nextTickMs: after };
    case 'all': {
      const from = nowMs - catchup.windowMs;
      let tick = nextTickMs >= from ? nextTickMs : nextTickAfter(spec, from - 1);
      const ticks: number[] = [];
      while (tick <= nowMs && ticks.length < MAX_CATCHUP_TICKS) {
        ticks.push(tick);
        tick = nextTickAfter(spec, tick);
      }
      return { ticks, nextTickMs: tick };
    }
  }
}

/**
 * The ticks from `fromMs` to `toMs` (both included), oldest first, for a backfill.
 * @returns undefined when there are more than `most`.
 */
export function ticksBetween(
  spec: TickSpec,
  fromMs: number,
  toMs: number,
  most: number,
): number[] | undefined {
  const ticks: number[] = [];
  let tick = nextTickAfter(spec, fromMs - 1);
  while (tick <= toMs) {
    if (ticks.length === most) return undefined;
    ticks.push(tick);
    tick = nextTickAfter(spec, tick);
  }
  return ticks;
}
