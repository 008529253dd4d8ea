/**
 * A latch between "there may be work" (a NOTIFY, a finished attempt, stop()) and a claim loop that sleeps
 * between claims. A wake-up that arrives while the loop is busy claiming is remembered, so the next `sleep`
 * returns at once instead of waiting out the poll interval: no wake-up is lost.
 *
 *   const wake = new WakeSignal();
 *   for (;;) { wake.take(); await claim(); await wake.sleep(pollMs); }   // elsewhere: wake.notify()
 *
 * A freed slot is a wake-up only while the queues may hold work ({@link slotFreed}): a claim that found them
 * drained ({@link drainedSince}) silences freed slots until the next {@link notify} or claim.
 */
export class WakeSignal {
  private pending = false;
  private resolve: (() => void) | undefined;
  /** {@link notify} calls so far: a claim that began before the last one may have missed its work. */
  private wakes = 0;
  private drained = false;

  /** Note that there may be work (a NOTIFY, stop()); ends a sleep in progress, or the next one before it starts. */
  notify(): void {
    this.wakes++;
    this.drained = false;
    this.pending = true;
    this.resolve?.();
  }

  /** A slot freed: a wake-up, unless the last claim found the queues drained and nothing notified since. */
  slotFreed(): void {
    if (this.drained) return;
    this.pending = true;
    this.resolve?.();
  }

  /**
   * A pass of the loop begins (with a claim or without a free slot): freed slots wake it again until
   * {@link drainedSince}. @returns the mark to give drainedSince.
   */
  claimStarted(): number {
    this.drained = false;
    return this.wakes;
  }

  /**
   * The claim begun at `mark` found fewer due items than slots and nothing due after it: the queues are drained,
   * unless a {@link notify} came since the mark (its work may have committed after the claim's snapshot).
   */
  drainedSince(mark: number): void {
    this.drained = this.wakes === mark;
  }

  /** Forget earlier wake-ups; call it just before looking for work, so later ones are kept. */
  take(): void {
    this.pending = false;
  }

  /**
   * Sleep up to `ms` milliseconds (≥ 0), or until {@link notify}; returns at once if a wake-up arrived since
   * the last {@link take}. Only one sleep may be in progress at a time.
   */
  sleep(ms: number): Promise<void> {
    if (this.pending) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.resolve = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.resolve = done;
    });
  }
}

/**
 * How long a claim loop waits after `failures` (≥ 1) failed claims in a row: doubling from the poll interval,
 * capped at the larger of the poll interval and 2 s, with ±20 % jitter so workers that lost the database together
 * do not return in step. The cap is low on purpose: a worker must resume claiming soon after an outage ends
 * (continuous recovery), and a failed claim costs the database little.
 */
export function claimRetryDelayMs(pollIntervalMs: number, failures: number): number {
  const cap = Math.max(pollIntervalMs, 2_000);
  const base = Math.min(pollIntervalMs * 2 ** Math.min(failures - 1, 10), cap);
  return Math.round(base * (0.8 + Math.random() * 0.4));
}
