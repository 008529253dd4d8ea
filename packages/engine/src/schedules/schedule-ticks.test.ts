import { describe, expect, it } from 'vitest';
import {
  MAX_CATCHUP_TICKS,
  ON_TIME_MS,
  cronOf,
  dueTicks,
  latestTickAtOrBefore,
  nextTickAfter,
  ticksBetween,
  type TickSpec,
} from './schedule-ticks.js';

const MINUTE_MS = 60_000;
const minutely: TickSpec = { kind: 'cron', cron: '* * * * *', timezone: 'UTC' };
const at = (iso: string) => Date.parse(iso);

describe('tick arithmetic', () => {
  it('reads only cron patterns: five or six fields, or a nickname; never a date, which croner would fire once', () => {
    for (const cron of ['* * * * *', '0 */5 * * * *', '0 12 * * MON#2', '@daily', ' 30 2 * * * ']) {
      expect(() => cronOf(cron, 'UTC'), cron).not.toThrow();
    }
    for (const cron of [
      '2026-12-24T18:00:00Z',
      '2026-12-24T18:00:00.000+01:00',
      '* * * *',
      '0 0 0 1 1 * 2030',
      '@reboot',
    ]) {
      expect(() => cronOf(cron, 'UTC'), cron).toThrow(/not a cron pattern/);
    }
  });

  it('finds the next and the latest tick of a cron expression and of an interval', () => {
    expect(nextTickAfter(minutely, at('2026-01-01T10:05:00Z'))).toBe(at('2026-01-01T10:06:00Z'));
    expect(latestTickAtOrBefore(minutely, at('2026-01-01T10:05:00Z'))).toBe(at('2026-01-01T10:05:00Z'));
    expect(latestTickAtOrBefore(minutely, at('2026-01-01T10:05:59.999Z'))).toBe(at('2026-01-01T10:05:00Z'));
    const every = { kind: 'every', everyMs: 5 * MINUTE_MS } as const;
    expect(nextTickAfter(every, at('2026-01-01T10:05:00Z'))).toBe(at('2026-01-01T10:10:00Z'));
    expect(latestTickAtOrBefore(every, at('2026-01-01T10:09:59Z'))).toBe(at('2026-01-01T10:05:00Z'));
  });

  it('reads a cron expression in its time zone across DST: a local time that does not exist fires once, after', () => {
    const berlin: TickSpec = { kind: 'cron', cron: '30 2 * * *', timezone: 'Europe/Berlin' };
    // 2026-03-29: clocks jump from 02:00 to 03:00 in Berlin; 02:30 does not exist that day.
    const days = [at('2026-03-27T12:00:00Z')];
    for (let k = 0; k < 3; k++) days.push(nextTickAfter(berlin, days[days.length - 1] as number));
    expect(days.slice(1).map((d) => new Date(d).toISOString())).toEqual([
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // 03:00 CEST, the first time after the missing 02:30
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
  });

  it('catch-up none: the one due tick fires when on time; missed ticks never do', () => {
    const t = at('2026-01-01T10:00:00Z');
    expect(dueTicks(minutely, { kind: 'none' }, t, t + 1_000)).toEqual({
      ticks: [t],
      nextTickMs: t + MINUTE_MS,
    });
    expect(dueTicks(minutely, { kind: 'none' }, t, t + MINUTE_MS + 1)).toEqual({
      ticks: [],
      nextTickMs: t + 2 * MINUTE_MS,
    });
    const hourly: TickSpec = { kind: 'cron', cron: '0 * * * *', timezone: 'UTC' };
    expect(dueTicks(hourly, { kind: 'none' }, t, t + ON_TIME_MS + 1).ticks).toEqual([]);
  });

  it('catch-up latest after 3 hours down: one tick, the most recent, and the next after now', () => {
    const t = at('2026-01-01T10:00:00Z');
    const now = t + 3 * 60 * MINUTE_MS + 30_000;
    expect(dueTicks(minutely, { kind: 'latest' }, t, now)).toEqual({
      ticks: [t + 180 * MINUTE_MS],
      nextTickMs: t + 181 * MINUTE_MS,
    });
  });

  it('catch-up all: every tick of the window, at most MAX_CATCHUP_TICKS per evaluation, continuing after', () => {
    const t = at('2026-01-01T10:00:00Z');
    const now = t + 30 * MINUTE_MS;
    const windowed = dueTicks(minutely, { kind: 'all', windowMs: 5 * MINUTE_MS }, t, now);
    expect(windowed.ticks).toEqual([25, 26, 27, 28, 29, 30].map((k) => t + k * MINUTE_MS));
    expect(windowed.nextTickMs).toBe(t + 31 * MINUTE_MS);
    const far = dueTicks(minutely, { kind: 'all', windowMs: 1e12 }, t, t + 1000 * MINUTE_MS);
    expect(far.ticks).toHaveLength(MAX_CATCHUP_TICKS);
    expect(far.nextTickMs).toBe(t + MAX_CATCHUP_TICKS * MINUTE_MS);
  });

  it('lists the ticks of a backfill range, refusing more than asked for', () => {
    const t = at('2026-01-01T10:00:00Z');
    expect(ticksBetween(minutely, t, t + 2 * MINUTE_MS, 10)).toEqual([t, t + MINUTE_MS, t + 2 * MINUTE_MS]);
    expect(ticksBetween(minutely, t, t + 20 * MINUTE_MS, 10)).toBeUndefined();
  });
});
