import type { Worker } from '@palisade/engine';
import type { PaymentProvider } from '../invoice-settlement/payment-provider.js';
import { describeError } from '../invoice-settlement/timeline.js';
import type { SupportAgentEvent } from './activities.js';

/**
 * The support-agent demo's live timeline: one line per thing worth seeing — reclaims of a dead or stalled worker's
 * steps (with epoch and token), lost heartbeats, rejected stale writes, the provider's replayed refunds, the faults,
 * the approvals — stamped with the time since the demo started. Routine steps are summarised as progress lines.
 */
export class Timeline {
  private readonly startedAt = performance.now();
  private readonly failing = new Set<string>();
  /** By worker: steps of runs not in the spotlight it reclaimed (summarised, not printed one by one). */
  private readonly reclaims = new Map<string, number>();
  /** Writes of runs not in the spotlight that the database refused from superseded attempts (counted). */
  private rejections = 0;
  private handled = 0;

  /**
   * @param spotlight the email of a run whose reclaims are printed one by one (the faults' runs), or undefined for
   * a run whose reclaims are only counted.
   */
  constructor(
    private readonly log: (line: string) => void,
    private readonly totalEmails: number,
    private readonly spotlight: (runId: string) => string | undefined = () => undefined,
  ) {}

  /** ms since the timeline started. */
  elapsedMs(): number {
    return performance.now() - this.startedAt;
  }

  /** Print `text` as said by `actor`, stamped with the time since the start. */
  line(actor: string, text: string): void {
    const at = `+${(this.elapsedMs() / 1000).toFixed(2)}s`.padStart(8);
    this.log(`${at}  ${actor.padEnd(12)} ${text}`);
  }

  /** Count a finished email; print a progress line now and then. */
  emailDone(): void {
    this.handled++;
    if (this.handled % 25 === 0 || this.handled === this.totalEmails) {
      this.line('progress', `${this.handled}/${this.totalEmails} emails handled`);
    }
    if (this.handled === this.totalEmails && this.reclaims.size > 0) {
      const by = [...this.reclaims].map(([workerId, n]) => `${workerId} ${n}`).join(', ');
      const total = [...this.reclaims.values()].reduce((a, b) => a + b, 0);
      this.line(
        'progress',
        `${total} more steps of other emails were reclaimed from workers that lost their leases (${by}); the ` +
          `database refused ${this.rejections} late write(s) of the attempts they superseded`,
      );
    }
  }

  /** Print what a worker does with leases: reclaims, aborts, lost heartbeats, rejected stale writes. */
  watchWorker(worker: Worker, workerId: string): void {
    const e = worker.events;
    e.on('attempt:claimed', ({ attempt, epoch, activity }) => {
      if (epoch === 1) return;
      const emailId = this.spotlight(attempt.runId);
      if (emailId === undefined) {
        this.reclaims.set(workerId, (this.reclaims.get(workerId) ?? 0) + 1);
        return;
      }
      this.line(
        workerId,
        `RECLAIMED ${activity.replace(/^support-agent\./, '')} of ${emailId} · epoch ${epoch} · token ${attempt.token} ` +
          '(the previous owner lost its lease)',
      );
    });
    e.on('attempt:failed', ({ attempt, failure, retry }) =>
      this.line(
        workerId,
        `attempt failed: ${attempt.stepLabel} (token ${attempt.token}): ${failure.type}: ${failure.message}${retry ? ' — will retry' : ''}`,
      ),
    );
    e.on('attempt:stale-rejected', ({ attempt, error }) => {
      const emailId = this.spotlight(attempt.runId);
      if (emailId === undefined) {
        this.rejections++;
        return;
      }
      this.line(
        workerId,
        `${error.operation} REJECTED by the database for ${attempt.stepLabel} of ${emailId}: stale token ` +
          `${error.staleToken}, current token ${error.currentToken ?? 'none'} (${error.reason})`,
      );
    });
    e.on('heartbeat:failed', ({ error }) => {
      if (this.failing.has(workerId)) return;
      this.failing.add(workerId);
      // The statement's text adds nothing here.
      const why = describeError(error).split(' in statement:')[0];
      this.line(workerId, `heartbeat lost: ${why} (its leases are no longer being renewed)`);
    });
    e.on('heartbeat:sent', () => {
      if (this.failing.delete(workerId)) this.line(workerId, 'heartbeats get through again');
    });
  }

  /** Print the provider's replayed refunds and held answers. */
  watchProvider(provider: PaymentProvider, emailOf: (idempotencyKey: string) => string): void {
    provider.events.on('refund:accepted', ({ refund, replayed }) => {
      if (replayed) {
        this.line(
          'provider',
          `replayed ${refund.id} for ${emailOf(refund.idempotencyKey)}: same idempotency key, same refund ` +
            `(request ${refund.requestCount}); nothing new refunded`,
        );
      }
    });
    provider.events.on('response:held', ({ idempotencyKey, chargeId }) =>
      this.line(
        'provider',
        `refunded ${emailOf(idempotencyKey)} as ${chargeId} — and holds the answer (slow card network)`,
      ),
    );
    provider.events.on('response:released', ({ idempotencyKey, chargeId }) =>
      this.line('provider', `finally answers the held request for ${emailOf(idempotencyKey)} (${chargeId})`),
    );
  }

  /** Print what the refund activity reports for reclaimed attempts, and every refused write. */
  activity(event: SupportAgentEvent): void {
    const { by } = event;
    if (event.type === 'refund:refused') {
      this.line(
        by.workerId,
        `fenced refund write for ${event.emailId} REFUSED (token ${by.token}): ${describeError(event.error)}`,
      );
    } else if (event.type === 'refund:recorded' && by.epoch > 1) {
      this.line(
        by.workerId,
        `fenced transaction COMMITTED for ${event.emailId}: refund ledger entry #${event.ledgerEntryId}` +
          `${event.alreadyRecorded ? ' (already recorded by an earlier attempt)' : ''} (token ${by.token})`,
      );
    }
  }
}
