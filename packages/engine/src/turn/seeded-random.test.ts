/** The seeded random numbers of workflow code (seeded-random.ts): repeatable per run id, spread, pinned. */
import { describe, expect, it } from 'vitest';
import { seededRandom } from './seeded-random.js';

describe('seededRandom', () => {
  it('draws the same sequence from the same seed, another from another seed', () => {
    const draw = (seed: string) => {
      const next = seededRandom(seed);
      return Array.from({ length: 50 }, () => next());
    };
    const a = draw('0190f3a1-0000-7000-8000-000000000001');
    expect(draw('0190f3a1-0000-7000-8000-000000000001')).toEqual(a);
    const b = draw('0190f3a1-0000-7000-8000-000000000002');
    expect(b).not.toEqual(a);
    expect(new Set([...a, ...b]).size).toBe(100);
  });

  it('draws what it drew when its seed was hashed by node:crypto, so that runs recorded then replay the same', () => {
    const next = seededRandom('0190f3a1-0000-7000-8000-000000000001');
    expect(Array.from({ length: 4 }, () => next())).toEqual([
      0.9686863070819527, 0.5596043523401022, 0.4246054261457175, 0.7756592240184546,
    ]);
    // A seed beyond ASCII (a lone surrogate is hashed as U+FFFD, as node:crypto and TextEncoder do).
    const wide = seededRandom('é\u{1F600}\uD800x');
    expect([wide(), wide(), wide()]).toEqual([0.400086950045079, 0.670778710860759, 0.6755220983177423]);
  });

  it('draws numbers in [0, 1) spread over the whole range', () => {
    const next = seededRandom('spread');
    const values = Array.from({ length: 10_000 }, () => next());
    for (const v of values) expect(v >= 0 && v < 1).toBe(true);
    // Each tenth of the range gets roughly its share (10 % ± 2 %).
    for (let i = 0; i < 10; i++) {
      const share = values.filter((v) => v >= i / 10 && v < (i + 1) / 10).length / values.length;
      expect(share).toBeGreaterThan(0.08);
      expect(share).toBeLessThan(0.12);
    }
  });
});
