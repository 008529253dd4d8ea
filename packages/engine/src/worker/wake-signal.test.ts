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

  it('wakes on a freed slot until a claim finds the queues drained, and again after a notify', async () => {
    const wake = new WakeSignal();
    wake.take();
    wake.slotFreed(); // before any claim: the queues may hold work
    expect(await settled(wake.sleep(60_000))).toBe(true);

    wake.take();
    wake.drainedSince(wake.claimStarted()); // a claim found fewer due items than slots
    wake.slotFreed();
    expect(await settled(wake.sleep(60_000))).toBe(false);
    wake.notify(); // a NOTIFY: new work, the sleep ends and freed slots count again
    wake.take();
    wake.slotFreed();
    expect(await settled(wake.sleep(60_000))).toBe(true);
  });

  it('does not take the queues for drained when a notify came while the claim ran', async () => {
    const wake = new WakeSignal();
    const mark = wake.claimStarted();
    wake.notify(); // its work may have committed after the claim's snapshot
    wake.drainedSince(mark);
    wake.take();
    wake.slotFreed();
    expect(await settled(wake.sleep(60_000))).toBe(true);
  });

  it('counts freed slots again from the next pass of the loop, claim or not', async () => {
    const wake = new WakeSignal();
    wake.drainedSince(wake.claimStarted());
    wake.claimStarted(); // a pass with no free slot: it could not look, so the queues may hold work
    wake.take();
    wake.slotFreed();
    expect(await settled(wake.sleep(60_000))).toBe(true);
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
