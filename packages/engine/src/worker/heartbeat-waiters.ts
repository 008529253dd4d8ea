import { monotonicNow } from './lease-clock.js';

/**
 * The `ctx.heartbeat()` calls of one attempt waiting for a heartbeat that renews its lease: a call is answered by
 * the first successful heartbeat *sent after* it (one sent before cannot carry its details), and rejected with
 * the attempt's poison when the attempt is aborted or ends.
 */
export class HeartbeatWaiters {
  private waiters: { sentAfter: number; resolve: () => void; reject: (e: unknown) => void }[] = [];

  /** Wait for a heartbeat sent from now on. */
  add(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ sentAfter: monotonicNow(), resolve, reject });
    });
  }

  /** A heartbeat sent at `sentAtMs` succeeded: answer every call made before it was sent. */
  renewed(sentAtMs: number): void {
    for (const w of this.waiters.filter((w) => w.sentAfter <= sentAtMs)) w.resolve();
    this.waiters = this.waiters.filter((w) => w.sentAfter > sentAtMs);
  }

  /** Whether a call waits for a heartbeat. */
  get waiting(): boolean {
    return this.waiters.length > 0;
  }

  /** Reject every waiting call with `error`. */
  rejectAll(error: unknown): void {
    for (const w of this.waiters) w.reject(error);
    this.waiters = [];
  }
}
