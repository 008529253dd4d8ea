import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WakeSignal, claimRetryDelayMs } from './wake-signal.js';

describe('WakeSignal', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  /** Whether `p` has settled once pending microtasks have run (fake timers: no time passes). */
  async function settled(p: Promise<void>): Promise<boolean> {
    let done = false;
    void p.then(() => (done = true));
    await vi.advanceTimersByTimeAsync(0);
    return done;
  }

  it('sleeps the whole interval when nothing notifies', async () => {
    const wake = new WakeSignal();
    wake.take();
    const sleeping = wake.sleep(1_000);
    await vi.advanceTimersByTimeAsync(999);
    expect(await settled(sleeping)).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await settled(sleeping)).toBe(true);
  });

  it('ends a sleep in progress on notify', async () => {
    const wake = new WakeSignal();
    wake.take();
    const sleeping = wake.sleep(60_000);
    expect(await settled(sleeping)).toBe(false);
    wake.notify();
    expect(await settled(sleeping)).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('keeps a wake-up that arrives while the loop is busy (between take and sleep)', async () => {
    const wake = new WakeSignal();
    wake.take();
    wake.notify(); // e.g. a NOTIFY while the claim statement is in flight
    expect(await settled(wake.sleep(60_000))).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('forgets wake-ups that arrived before take', async () => {
    const wake = new WakeSignal();
    wake.notify();
    wake.take();
    const sleeping = wake.sleep(1_000);
    expect(await settled(sleeping)).toBe(false);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await settled(sleeping)).toBe(true);
  });
});

describe('claimRetryDelayMs', () => {
  it('doubles from the poll interval and stops at max(poll, 2 s), within ±20 %', () => {
    const within = (ms: number, base: number) => ms >= base * 0.8 && ms <= base * 1.2;
    for (let i = 0; i < 50; i++) {
      expect(within(claimRetryDelayMs(100, 1), 100)).toBe(true);
      expect(within(claimRetryDelayMs(100, 2), 200)).toBe(true);
      expect(within(claimRetryDelayMs(100, 5), 1_600)).toBe(true);
      expect(within(claimRetryDelayMs(100, 40), 2_000)).toBe(true);
      expect(within(claimRetryDelayMs(1_000, 3), 2_000)).toBe(true);
      expect(within(claimRetryDelayMs(5_000, 9), 5_000)).toBe(true);
    }
  });
});
