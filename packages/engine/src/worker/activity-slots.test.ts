import { describe, expect, it } from 'vitest';
import { ActivitySlots } from './activity-slots.js';

function slots(concurrency: number, prefetch: number, runsMs: readonly number[]): ActivitySlots {
  const s = new ActivitySlots({ concurrency, prefetch });
  for (const ms of runsMs) s.codeRan(ms);
  return s;
}

describe('prefetch sizing', () => {
  it('claims nothing ahead before an attempt ran, nor with prefetch 0', () => {
    expect(slots(10, 50, []).prefetchLimit()).toBe(0);
    expect(slots(10, 0, [1, 1, 1]).prefetchLimit()).toBe(0);
  });

  it('holds as many grants as the slots start within 200 ms at the mean run time, at most prefetch', () => {
    expect(slots(10, 50, [0, 0, 0]).prefetchLimit()).toBe(50);
    expect(slots(10, 50, [1, 2, 3]).prefetchLimit()).toBe(50);
    expect(slots(10, 50, [100, 100]).prefetchLimit()).toBe(20); // 10 × 200 / 100
    expect(slots(4, 50, [50, 150]).prefetchLimit()).toBe(8); // mean 100: 4 × 200 / 100
  });

  it('claims only for free slots while the mean run time is 200 ms or more', () => {
    expect(slots(10, 50, [200]).prefetchLimit()).toBe(0);
    expect(slots(10, 50, [10, 390]).prefetchLimit()).toBe(0);
  });

  it('sizes by the last 32 attempts only', () => {
    const s = slots(
      10,
      50,
      Array.from({ length: 40 }, () => 10_000),
    );
    expect(s.prefetchLimit()).toBe(0);
    for (let i = 0; i < 31; i++) s.codeRan(1);
    expect(s.prefetchLimit()).toBe(0); // one long run left in the window: mean ~313 ms
    s.codeRan(1);
    expect(s.prefetchLimit()).toBe(50);
  });
});
