import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isPalisadeError } from './errors.js';
import { MAX_DURATION_MS, durationMs, durationSchema, parseDuration, toMs } from './duration.js';

describe('parseDuration', () => {
  it.each([
    ['250ms', 250],
    ['30s', 30_000],
    ['5m', 300_000],
    ['2h', 7_200_000],
    ['1d', 86_400_000],
    ['1.5s', 1_500],
    ['0ms', 0],
    [' 5m ', 300_000],
    ['5 m', 300_000],
  ])('reads the string %j as %d ms', (input, expected) => {
    expect(parseDuration(input)).toBe(expected);
  });

  it('takes a number as milliseconds, rounded to a whole number', () => {
    expect(parseDuration(1_500)).toBe(1_500);
    expect(parseDuration(0)).toBe(0);
    expect(parseDuration(2.6)).toBe(3);
  });

  it('rounds a fractional string to whole milliseconds', () => {
    expect(parseDuration('1.0004s')).toBe(1_000);
    expect(parseDuration('0.5ms')).toBe(1);
  });

  it.each(['5 minutes', '5', '500', '', 'm', '5M', '-5s', '1e3ms', '5m5s', '.5s', 'five seconds'])(
    'returns undefined for the string %j',
    (input) => {
      expect(parseDuration(input)).toBeUndefined();
    },
  );

  it.each([-1, -0.4, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY])(
    'returns undefined for the number %d',
    (input) => {
      expect(parseDuration(input)).toBeUndefined();
    },
  );
});

describe('toMs', () => {
  it('returns the duration in milliseconds', () => {
    expect(toMs('2h', 'leaseMs')).toBe(7_200_000);
    expect(toMs(30_000, 'leaseMs')).toBe(30_000);
  });

  it('refuses "5 minutes" with an INVALID_OPTIONS error that names the field and quotes the value', () => {
    let caught: unknown;
    try {
      toMs('5 minutes', 'worker.heartbeatIntervalMs');
    } catch (error) {
      caught = error;
    }
    expect(isPalisadeError(caught, 'INVALID_OPTIONS')).toBe(true);
    expect(() => toMs('5 minutes', 'worker.heartbeatIntervalMs')).toThrow(
      /^\[INVALID_OPTIONS\] invalid worker\.heartbeatIntervalMs: "5 minutes" is not a duration/,
    );
  });

  it('refuses a negative number, naming the field and the value', () => {
    expect(() => toMs(-5, 'leaseMs')).toThrow(/invalid leaseMs: -5 is not a duration/);
  });

  it('refuses NaN and shows it as NaN, not as null', () => {
    expect(() => toMs(Number.NaN, 'leaseMs')).toThrow(/invalid leaseMs: NaN is not a duration/);
    expect(() => toMs(Number.POSITIVE_INFINITY, 'leaseMs')).toThrow(
      /invalid leaseMs: Infinity is not a duration/,
    );
  });

  it('names the value "duration" when the caller does not say which field it is', () => {
    expect(() => toMs('soon')).toThrow(/invalid duration: "soon" is not a duration/);
  });

  it('refuses a duration longer than Node timers and the engine hold (2^31-1 ms), naming the field', () => {
    expect(toMs(MAX_DURATION_MS, 'pollIntervalMs')).toBe(MAX_DURATION_MS);
    expect(() => toMs('30d', 'pollIntervalMs')).toThrow(
      /invalid pollIntervalMs: "30d" is too long: must be ≤ 2,147,483,647 ms/,
    );
    expect(() => toMs(1e12, 'graceMs')).toThrow(/invalid graceMs: 1000000000000 is too long/);
  });

  it('takes a larger bound when the caller gives one (durable sleeps)', () => {
    expect(toMs('30d', 'sleep', 10 * MAX_DURATION_MS)).toBe(30 * 86_400_000);
  });

  it('lists the accepted forms in its message', () => {
    expect(() => toMs('soon')).toThrow(/'250ms' '30s' '5m' '2h' '1d'/);
  });
});

describe('durationMs', () => {
  const schema = z.object({ leaseMs: durationMs });

  it('transforms a duration string to milliseconds', () => {
    expect(schema.parse({ leaseMs: '1.5s' })).toEqual({ leaseMs: 1_500 });
    expect(schema.parse({ leaseMs: 42 })).toEqual({ leaseMs: 42 });
  });

  it.each([
    ['5 minutes', '"5 minutes" is not a duration'],
    [-5, '-5 is not a duration'],
    [Number.NaN, 'NaN is not a duration'],
    [Number.POSITIVE_INFINITY, 'Infinity is not a duration'],
    [null, 'null is not a duration'],
    [true, 'true is not a duration'],
  ])('refuses %j with an issue at the field path that shows the value', (value, message) => {
    const parsed = schema.safeParse({ leaseMs: value });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues).toHaveLength(1);
    expect(parsed.error?.issues[0]?.path).toEqual(['leaseMs']);
    expect(parsed.error?.issues[0]?.message).toContain(message);
  });
});

describe('durationSchema', () => {
  it('refuses a value above its bound with an issue naming the bound', () => {
    const parsed = z.object({ delayMs: durationSchema(1_000) }).safeParse({ delayMs: '2s' });
    expect(parsed.error?.issues[0]?.path).toEqual(['delayMs']);
    expect(parsed.error?.issues[0]?.message).toContain('must be ≤ 1,000 ms');
  });
});
