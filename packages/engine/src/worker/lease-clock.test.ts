import { describe, expect, it } from 'vitest';
import { isGrantFresh, localLeaseDeadline, monotonicNow, type LeaseClockSettings } from './lease-clock.js';

const s: LeaseClockSettings = { clockRateError: 0.001, safetyMarginMs: 1_000 };

describe('localLeaseDeadline', () => {
  it('counts from the send time, shrinks the remaining lease by the drift allowance and deducts the margin', () => {
    // 10_000 + 30_000 × 0.999 − 1_000
    expect(localLeaseDeadline(10_000, 30_000, s)).toBeCloseTo(38_970, 9);
  });

  it('with no drift and no margin is exactly send time plus the remaining lease', () => {
    expect(localLeaseDeadline(500, 2_000, { clockRateError: 0, safetyMarginMs: 0 })).toBe(2_500);
  });

  it('a later send of the same remaining lease gives a later deadline, a slower reply never does', () => {
    // The reply's time in flight is not an input: it is counted against the attempt.
    expect(localLeaseDeadline(2_000, 30_000, s)).toBeGreaterThan(localLeaseDeadline(1_000, 30_000, s));
  });

  it('is earlier than the database would let the lease run, by at least the margin', () => {
    const sentAt = 0;
    const remaining = 30_000;
    expect(localLeaseDeadline(sentAt, remaining, s)).toBeLessThanOrEqual(
      sentAt + remaining - s.safetyMarginMs,
    );
  });
});

describe('isGrantFresh', () => {
  it('takes a grant whose reply came at once', () => {
    const deadline = localLeaseDeadline(0, 30_000, s);
    expect(isGrantFresh(deadline, 0, 30_000, 0.5, s)).toBe(true);
  });

  it('refuses a grant that used up more than minFreshness of its lease in flight', () => {
    const deadline = localLeaseDeadline(0, 30_000, s);
    expect(isGrantFresh(deadline, 14_000, 30_000, 0.5, s)).toBe(true);
    expect(isGrantFresh(deadline, 16_000, 30_000, 0.5, s)).toBe(false);
  });

  it('credits back the margin and drift allowance, so the line is at exactly minFreshness of the grant', () => {
    const deadline = localLeaseDeadline(0, 30_000, s);
    expect(isGrantFresh(deadline, 15_000, 30_000, 0.5, s)).toBe(true);
    expect(isGrantFresh(deadline, 15_001, 30_000, 0.5, s)).toBe(false);
  });

  it('counts lease the database had already consumed before the claim replied', () => {
    // The database granted the lease, then the reply said only 12 s were left of 30 s.
    const deadline = localLeaseDeadline(0, 12_000, s);
    expect(isGrantFresh(deadline, 0, 30_000, 0.5, s)).toBe(false);
    expect(isGrantFresh(deadline, 0, 30_000, 0.3, s)).toBe(true);
  });

  it('takes a fresh grant of a lease capped by a short start-to-close timeout, even with a margin larger than half of it', () => {
    // The past bug: judged against the nominal lease, or with M counted, a lease capped at 1.5 s by the attempt
    // deadline (with M = 1 s) was always stale, and the step was released and reclaimed forever.
    const granted = 1_500;
    const deadline = localLeaseDeadline(0, granted, s);
    expect(isGrantFresh(deadline, 10, granted, 0.5, s)).toBe(true);
    expect(isGrantFresh(deadline, 0, granted, 0.9, s)).toBe(true);
  });

  it('with minFreshness 0 takes any grant whose lease is not already over', () => {
    const deadline = localLeaseDeadline(0, 30_000, s);
    expect(isGrantFresh(deadline, 29_999, 30_000, 0, s)).toBe(true);
    expect(isGrantFresh(deadline, 30_001, 30_000, 0, s)).toBe(false);
  });
});

describe('monotonicNow', () => {
  it('never goes backwards', () => {
    const a = monotonicNow();
    const b = monotonicNow();
    expect(b).toBeGreaterThanOrEqual(a);
  });
});
