import { describe, expect, it } from 'vitest';
import { uuid7, uuid7Generator } from './uuid7.js';

const FORMAT = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The id's 128 bits as a bigint. */
const bits = (id: string): bigint => BigInt(`0x${id.replace(/-/g, '')}`);
const msOf = (id: string): number => Number(bits(id) >> 80n);
/** The 42-bit counter: rand_a (12 bits) and the 30 bits after the variant. */
const counterOf = (id: string): bigint => {
  const b = bits(id);
  return (((b >> 64n) & 0xfffn) << 30n) | ((b >> 32n) & 0x3fff_ffffn);
};

/** A clock the test moves by hand. */
function manualClock(start: number) {
  let t = start;
  return { now: () => t, set: (ms: number) => void (t = ms) };
}

describe('uuid7', () => {
  it('writes version 7 and variant 0b10, lower-case 8-4-4-4-12, and the clock in the first 48 bits', () => {
    const before = Date.now();
    const id = uuid7();
    const after = Date.now();
    expect(id).toMatch(FORMAT);
    expect((bits(id) >> 76n) & 0xfn).toBe(7n);
    expect((bits(id) >> 62n) & 0x3n).toBe(2n);
    expect(msOf(id)).toBeGreaterThanOrEqual(before);
    expect(msOf(id)).toBeLessThanOrEqual(after);
  });

  it('keeps every id of one millisecond in the order made: the counter goes up by one', () => {
    const clock = manualClock(1_796_000_000_000);
    const next = uuid7Generator({ now: clock.now });
    const ids = Array.from({ length: 1000 }, () => next());
    expect(new Set(ids.map(msOf))).toEqual(new Set([1_796_000_000_000]));
    for (let k = 1; k < ids.length; k++) {
      expect(counterOf(ids[k]!) - counterOf(ids[k - 1]!)).toBe(1n);
      expect(ids[k]! > ids[k - 1]!).toBe(true);
    }
    // Seeded with its top bit clear, so a millisecond has at least 2^41 ids before the counter could roll over.
    expect(counterOf(ids[0]!) < 2n ** 41n).toBe(true);
  });

  it('sorts across milliseconds by the clock, and reseeds the counter at each new one', () => {
    const clock = manualClock(1_796_000_000_000);
    const next = uuid7Generator({ now: clock.now });
    const ids: string[] = [];
    for (let ms = 0; ms < 50; ms++) {
      clock.set(1_796_000_000_000 + ms * 7);
      for (let k = 0; k < 5; k++) ids.push(next());
    }
    expect([...ids].sort()).toEqual(ids);
    expect(new Set(ids).size).toBe(ids.length);
    // A fresh random seed per millisecond, not one counter running on across them.
    const firsts = ids.filter((_, k) => k % 5 === 0).map(counterOf);
    expect(firsts.some((c, k) => k > 0 && c < firsts[k - 1]!)).toBe(true);
  });

  it('stays in order when the clock steps back: it keeps the last millisecond and counts on', () => {
    const clock = manualClock(1_796_000_000_500);
    const next = uuid7Generator({ now: clock.now });
    const a = next();
    clock.set(1_796_000_000_000);
    const b = next();
    expect(msOf(b)).toBe(1_796_000_000_500);
    expect(counterOf(b) - counterOf(a)).toBe(1n);
    expect(b > a).toBe(true);
  });

  it('seeds the counter with its top bit clear even when every random bit is set (the rollover guard)', () => {
    const next = uuid7Generator({ now: () => 1_796_000_000_000, random: (b) => b.fill(0xff) });
    const first = next();
    expect(counterOf(first)).toBe(2n ** 41n - 1n);
    expect(counterOf(next())).toBe(2n ** 41n);
    expect(first.endsWith('ffffffff')).toBe(true);
  });

  it('uses fresh random bits in the last 32 bits of every id', () => {
    const clock = manualClock(1_796_000_000_000);
    const next = uuid7Generator({ now: clock.now });
    const tails = new Set(Array.from({ length: 200 }, () => next().slice(-8)));
    expect(tails.size).toBeGreaterThan(190);
  });

  it('refuses a clock that is not an integer count of milliseconds in range, naming the value', () => {
    for (const bad of [Number.NaN, -1, 1.5, 2 ** 48]) {
      const next = uuid7Generator({ now: () => bad });
      expect(() => next()).toThrow(
        new RangeError(`uuid7: the clock read ${String(bad)}, not an integer in [0, 2^48) ms`),
      );
    }
  });
});
