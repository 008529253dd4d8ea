import { describe, expect, it } from 'vitest';
import { MAX_INSTANT_MS, MIN_INSTANT_MS, instantProblem, instantSchema } from './instant.js';

describe('instants', () => {
  it('takes the years 0001 to 9999 and refuses the ends of the JavaScript range and Invalid Dates', () => {
    expect(MIN_INSTANT_MS).toBe(Date.parse('0001-01-01T00:00:00.000Z'));
    expect(MAX_INSTANT_MS).toBe(Date.parse('9999-12-31T23:59:59.999Z'));
    for (const ms of [MIN_INSTANT_MS, 0, Date.now(), MAX_INSTANT_MS])
      expect(instantProblem(ms)).toBeUndefined();
    for (const ms of [MIN_INSTANT_MS - 1, MAX_INSTANT_MS + 1, 8.64e15, -8.64e15]) {
      expect(instantProblem(ms)).toMatch(/between the years 0001 and 9999/);
    }
    expect(instantProblem(Number.NaN)).toMatch(/Invalid Date/);
    expect(instantSchema.safeParse(new Date(8.64e15)).success).toBe(false);
    expect(instantSchema.safeParse(new Date('x')).success).toBe(false);
    expect(instantSchema.safeParse('2030-01-01').success).toBe(false);
    expect(instantSchema.safeParse(new Date(0)).success).toBe(true);
  });
});
