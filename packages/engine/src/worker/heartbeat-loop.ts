import { leaseLostFromRow } from '../queries/fenced-outcome.js';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { heartbeatSteps, type HeartbeatResultRow } from '../queries/heartbeat-steps.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { ActivityAttempt } from './activity-attempt.js';
import { monotonicNow } from './lease-clock.js';
import type { WorkerEvents } from './worker-events.js';

/**
 * Renews every lease this worker holds in one statement, every `intervalMs`, on a connection reserved for it
 * (invariant 7; I10). At most one heartbeat is in flight; each has a client timeout ≤ the interval (the server
 * side is bounded by the connection's statement_timeout). A failed or timed-out heartbeat never moves a local
 * deadline; the next one is tried after a quarter interval, so two can still fail before the lease runs out.
 * A timed-out heartbeat's late reply is still applied for its final verdicts (rejections, cancel requests), so
 * an entry the database rejected is never sent again to be rejected twice. Rejections fire the attempt's signal with `lease-lost`; cancel requests fire it with `cancelled`.
 */
export class HeartbeatLoop {
  private readonly attempts = new Set<ActivityAttempt>();
  private inFlight = false;
  private flushRequested = false;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private idle: Promise<void> = Promise.resolve();

  constructor(
    private readonly connection: Database,
    private readonly names: SchemaNames,
    private readonly intervalMs: number,
    private readonly timeoutMs: number,
    private readonly events: WorkerEvents,
    private readonly logger: Logger,
  ) {}

  start(): void {
    this.running = true;
    this.schedule(this.intervalMs);
  }

  /** Stop renewing; resolves when no heartbeat is in flight. */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    await this.idle;
  }

  add(attempt: ActivityAttempt): void {
    this.attempts.add(attempt);
  }

  delete(attempt: ActivityAttempt): void {
    this.attempts.delete(attempt);
  }

  /** Renew now (coalesced with one in flight). */
  requestFlush(): void {
    if (!this.running) return;
    if (this.inFlight) {
      this.flushRequested = true;
      return;
    }
    this.schedule(0);
  }

  private schedule(delayMs: number): void {
    clearTimeout(this.timer);
    if (!this.running) return;
    this.timer = setTimeout(() => void this.tick(), delayMs);
    this.timer.unref?.();
  }

  private async tick(): Promise<void> {
    if (!this.running) return;
    if (this.inFlight) {
      this.flushRequested = true;
      return;
    }
    const batch = [...this.attempts].filter((a) => a.live);
    if (batch.length === 0) {
      this.schedule(this.intervalMs);
      return;
    }
    this.inFlight = true;
    this.flushRequested = false;
    let release!: () => void;
    this.idle = new Promise<void>((resolve) => (release = resolve));
    const sentAt = monotonicNow();
    const details = batch.map((a) => a.pendingDetails);
    const request = heartbeatSteps(
      this.connection,
      this.names,
      batch.map((a, i) => ({
        stepId: a.ref.stepId,
        token: a.ref.token,
        nonce: a.ref.nonce,
        ...(details[i] ? { details: details[i].value } : {}),
      })),
    );
    let timeout: NodeJS.Timeout | undefined;
    let timedOut = false;
    let ok = false;
    try {
      const rows = await Promise.race([
        request,
        new Promise<never>((_, reject) => {
          timeout = setTimeout(() => {
            timedOut = true;
            reject(new Error(`heartbeat timed out after ${this.timeoutMs} ms`));
          }, this.timeoutMs);
        }),
      ]);
      ok = true;
      const { renewed, lost } = this.applyReply(batch, details, rows, sentAt, true);
      this.events.emit('heartbeat:sent', { attempts: batch.length, renewed, lost });
    } catch (error) {
      this.logger.warn({ err: error, attempts: batch.length }, 'heartbeat:failed');
      this.events.emit('heartbeat:failed', { error });
    } finally {
      clearTimeout(timeout);
      // A timed-out statement may still be running on the connection: do not send another until it settles.
      // Its late reply still carries the database's verdicts, which are final: an entry it rejected (and recorded
      // as a stale write) is lost now, and must not be sent again to be rejected and recorded a second time.
      void request
        .then(
          (rows) => {
            if (!timedOut) return;
            try {
              this.applyReply(batch, details, rows, sentAt, false);
            } catch (error) {
              // A listener of the attempt's events threw: log it, as the on-time path does, never crash.
              this.logger.warn({ err: error, attempts: batch.length }, 'heartbeat:late-reply-failed');
            }
          },
          () => undefined,
        )
        .finally(() => {
          this.inFlight = false;
          release();
          if (this.flushRequested) this.schedule(0);
        });
      this.schedule(ok ? this.intervalMs : Math.max(1, Math.floor(this.intervalMs / 4)));
    }
  }

  /**
   * Apply one heartbeat reply to the attempts of its batch: rejections poison the attempt and fire its signal,
   * cancel requests fire it with `cancelled`. Renewals move local deadlines only when `renew` (a reply that came
   * before the client timeout); a late reply's renewals are dropped, as its statement was given up for lost.
   */
  private applyReply(
    batch: readonly ActivityAttempt[],
    details: readonly ActivityAttempt['pendingDetails'][],
    rows: readonly HeartbeatResultRow[],
    sentAt: number,
    renew: boolean,
  ): { renewed: number; lost: number } {
    // By step and token: a zombie attempt and its successor of one step may share this batch.
    const byAttempt = new Map(rows.map((r) => [`${r.id}:${r.token}`, r]));
    let renewed = 0;
    let lost = 0;
    for (const [i, attempt] of batch.entries()) {
      const row = byAttempt.get(`${attempt.ref.stepId}:${attempt.ref.token}`);
      if (!row) continue;
      if (row.renewed && row.remaining_ms !== null) {
        renewed++;
        if (renew) {
          if (attempt.pendingDetails === details[i]) attempt.pendingDetails = undefined;
          attempt.leaseRenewed(sentAt, row.remaining_ms, row.lease_capped === true);
        }
        if (row.cancel_requested) attempt.abort('cancelled', 'the run or step was cancelled');
      } else if (row.reason === 'ended') {
        // This attempt's own outcome (completion, failure, release) committed while the heartbeat was in
        // flight: nothing was lost, and the attempt is finishing on its own.
      } else {
        lost++;
        attempt.leaseLost(leaseLostFromRow(row, attempt.ref, 'heartbeat'));
      }
    }
    return { renewed, lost };
  }
}
