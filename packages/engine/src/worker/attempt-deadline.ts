import { localLeaseDeadline, monotonicNow, type LeaseClockSettings } from './lease-clock.js';

/** Which local deadline of an attempt passed: its start-to-close timeout, or (as far as it can tell) its lease. */
export type PassedDeadline = 'deadline' | 'lease-expired-locally';

/** What {@link AttemptDeadline} needs: the grant, as the claim's reply gave it, and what to do when time runs out. */
export interface AttemptDeadlineOptions {
  /** Monotonic ms when the claim that granted the attempt was sent. */
  readonly claimSentAtMs: number;
  /** The lease left (ms) as the database computed it in the claim. */
  readonly remainingMs: number;
  /** The attempt's nominal lease (ms). */
  readonly leaseMs: number;
  /** The attempt's start-to-close timeout (ms). */
  readonly startToCloseTimeoutMs: number;
  /** ρ and M for this attempt (see lease-clock.ts). */
  readonly clock: LeaseClockSettings;
  /** Called (from a timer, or from {@link AttemptDeadline.check}) when a deadline has passed. */
  readonly onPassed: (which: PassedDeadline) => void;
}

/**
 * The two local deadlines of one attempt, on the monotonic clock, and the timer that fires when the earlier one
 * passes (I9, I11, invariant 11): the lease deadline, moved forward by each successful heartbeat, and the
 * start-to-close deadline, fixed at the claim. Fires even when the database cannot be reached.
 */
export class AttemptDeadline {
  /** Monotonic ms after which the worker must consider the lease lost. */
  private localDeadlineMs: number;
  /** Monotonic ms of the local start-to-close deadline. */
  private readonly attemptDeadlineMs: number;
  /**
   * True when the database capped the current lease at the attempt deadline (the claim or last renewal had
   * less than `leaseMs` to give): the lease then ends *at* the deadline, so reaching the local lease deadline
   * means the start-to-close timeout passed. Both local deadlines estimate the same instant from different send
   * times, and the lease one is usually a few ms earlier; without this the abort said `lease-expired-locally`,
   * nothing was recorded and the attempt was only ended by a later reclaim, without its retry backoff.
   */
  private leaseEndsAtDeadline: boolean;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: AttemptDeadlineOptions) {
    this.localDeadlineMs = localLeaseDeadline(o.claimSentAtMs, o.remainingMs, o.clock);
    this.leaseEndsAtDeadline = o.startToCloseTimeoutMs <= o.leaseMs;
    this.attemptDeadlineMs =
      o.claimSentAtMs + o.startToCloseTimeoutMs * (1 - o.clock.clockRateError) - o.clock.safetyMarginMs;
    this.arm();
  }

  /** The local lease deadline (monotonic ms): owner writes retry transient errors until then. */
  get leaseDeadlineMs(): number {
    return this.localDeadlineMs;
  }

  /** Whether the local lease deadline has passed (checked synchronously, just before each effect; I11). */
  get leasePassed(): boolean {
    return monotonicNow() >= this.localDeadlineMs;
  }

  /**
   * A heartbeat sent at `sentAtMs` renewed the lease with `remainingMs` left, ending at the attempt deadline if
   * `capped`. Moves the lease deadline, only forward.
   */
  renewed(sentAtMs: number, remainingMs: number, capped: boolean): void {
    const next = localLeaseDeadline(sentAtMs, remainingMs, this.o.clock);
    if (next > this.localDeadlineMs) {
      this.localDeadlineMs = next;
      this.leaseEndsAtDeadline = capped;
      this.arm();
    }
  }

  /** Report a deadline that has passed (`onPassed`), or wait on for the earlier one. */
  check(): void {
    const now = monotonicNow();
    if (now >= this.attemptDeadlineMs || (now >= this.localDeadlineMs && this.leaseEndsAtDeadline)) {
      this.o.onPassed('deadline');
    } else if (now >= this.localDeadlineMs) {
      this.o.onPassed('lease-expired-locally');
    } else this.arm();
  }

  /** Stop the timer (the attempt ended or was aborted). */
  clear(): void {
    clearTimeout(this.timer);
  }

  private arm(): void {
    clearTimeout(this.timer);
    const due = Math.min(this.localDeadlineMs, this.attemptDeadlineMs);
    this.timer = setTimeout(() => this.check(), Math.max(0, due - monotonicNow()));
    this.timer.unref?.();
  }
}
