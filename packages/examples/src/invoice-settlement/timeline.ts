import type { Worker } from '@palisade/engine';
import { AttemptAbortedError, LeaseLostError, PalisadeError } from '@palisade/sdk';
import type { InvoiceActivityEvent } from './activities.js';
import type { PaymentProvider } from './payment-provider.js';

/** One line of an error for humans: the code-prefixed message, without the stack. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return error.message;
  return String(error);
}

/** `error.code` when it is a Palisade error (matched by code, as errors may cross module copies). */
export function errorCode(error: unknown): string | undefined {
  if (error instanceof PalisadeError) return error.code;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/**
 * The demo's live timeline: one line per thing worth seeing — claims with epoch and token (the first ones, every
 * reclaim, and all of the watched invoice's), lost heartbeats, aborts, the provider's replays and held answers,
 * refused and rejected writes — stamped with the time since the demo started. Routine charges are summarised as
 * progress lines so that the rest stays readable.
 */
export class Timeline {
  private readonly startedAt = performance.now();
  /** stepId → invoice number, once an attempt of that step started. */
  private readonly invoices = new Map<string, string>();
  private readonly failing = new Set<string>();
  private readonly claimsShown = new Map<string, number>();
  private charged = 0;

  constructor(
    private readonly log: (line: string) => void,
    private readonly options: { readonly watchedInvoice: string; readonly totalInvoices: () => number },
  ) {}

  /** ms since the timeline started. */
  elapsedMs(): number {
    return performance.now() - this.startedAt;
  }

  line(actor: string, text: string): void {
    const at = `+${(this.elapsedMs() / 1000).toFixed(2)}s`.padStart(8);
    this.log(`${at}  ${actor.padEnd(12)} ${text}`);
  }

  private label(stepId: string, fallback: string): string {
    const invoice = this.invoices.get(stepId);
    return invoice ? `charge ${invoice}` : fallback;
  }

  private watched(stepId: string): boolean {
    return this.invoices.get(stepId) === this.options.watchedInvoice;
  }

  /** Print what a worker does with leases: aborts, lost heartbeats, rejected stale writes, non-charge claims. */
  watchWorker(worker: Worker, workerId: string): void {
    const e = worker.events;
    e.on('attempt:claimed', ({ attempt, epoch, activity }) => {
      if (activity.endsWith('charge-invoice')) return; // shown by the activity's own start event, with the invoice
      this.line(
        workerId,
        `claimed ${activity.replace(/^invoice-settlement\./, '')} · epoch ${epoch} · token ${attempt.token}`,
      );
    });
    e.on('attempt:completed', ({ attempt }) => {
      if (this.watched(attempt.stepId)) {
        this.line(
          workerId,
          `completed ${this.label(attempt.stepId, attempt.stepLabel)} (token ${attempt.token})`,
        );
      }
    });
    e.on('attempt:failed', ({ attempt, failure, retry }) =>
      this.line(
        workerId,
        `attempt failed: ${this.label(attempt.stepId, attempt.stepLabel)} (token ${attempt.token}): ` +
          `${failure.type}: ${failure.message}${retry ? ' — will retry' : ''}`,
      ),
    );
    e.on('attempt:aborted', ({ attempt, reason }) => {
      if (reason === 'shutdown') return; // every attempt's signal fires with `shutdown` once it ended
      const why =
        reason === 'lease-expired-locally'
          ? 'no heartbeat got through before its local lease deadline: it must assume the lease is gone'
          : reason === 'lease-lost'
            ? 'the database rejected its lease'
            : reason;
      this.line(
        workerId,
        `signal fired for ${this.label(attempt.stepId, attempt.stepLabel)} (token ${attempt.token}): ${why}`,
      );
    });
    e.on('attempt:stale-rejected', ({ attempt, error }) =>
      this.line(
        workerId,
        `${error.operation} REJECTED by the database for ${this.label(attempt.stepId, attempt.stepLabel)}: ` +
          `stale token ${error.staleToken}, current token ${error.currentToken ?? 'none'} (${error.reason})`,
      ),
    );
    e.on('heartbeat:failed', ({ error }) => {
      if (this.failing.has(workerId)) return;
      this.failing.add(workerId);
      this.line(workerId, `heartbeat lost: ${describeError(error)} (its leases are no longer being renewed)`);
    });
    e.on('heartbeat:sent', ({ lost }) => {
      if (this.failing.delete(workerId)) this.line(workerId, 'heartbeats get through again');
      if (lost > 0) this.line(workerId, `heartbeat: ${lost} lease(s) found lost`);
    });
  }

  /** Print the provider's replays and held answers. */
  watchProvider(provider: PaymentProvider, invoiceOf: (idempotencyKey: string) => string): void {
    provider.events.on('charge:accepted', ({ charge, replayed }) => {
      if (replayed) {
        this.line(
          'provider',
          `replayed ${charge.id} for ${invoiceOf(charge.idempotencyKey)}: same idempotency key, same charge ` +
            `(request ${charge.requestCount}); nothing new charged`,
        );
      }
    });
    provider.events.on('response:held', ({ idempotencyKey, chargeId }) =>
      this.line(
        'provider',
        `charged ${invoiceOf(idempotencyKey)} as ${chargeId} — and holds the answer (slow card network)`,
      ),
    );
    provider.events.on('response:released', ({ idempotencyKey, chargeId }) =>
      this.line(
        'provider',
        `finally answers the held request for ${invoiceOf(idempotencyKey)} (${chargeId})`,
      ),
    );
  }

  /** Print what the charge activity reports. */
  activity(event: InvoiceActivityEvent): void {
    const { by, invoiceNumber } = event;
    const watched = invoiceNumber === this.options.watchedInvoice;
    switch (event.type) {
      case 'charge:started': {
        this.invoices.set(by.stepId, invoiceNumber);
        const shown = this.claimsShown.get(by.workerId) ?? 0;
        if (by.epoch > 1) {
          this.line(
            by.workerId,
            `RECLAIMED charge ${invoiceNumber} · epoch ${by.epoch} · token ${by.token} (attempt ${by.attempt}; ` +
              'the previous owner lost its lease)',
          );
        } else if (watched || shown < 2) {
          this.claimsShown.set(by.workerId, shown + 1);
          this.line(by.workerId, `claimed charge ${invoiceNumber} · epoch ${by.epoch} · token ${by.token}`);
        }
        return;
      }
      case 'charge:answered':
        if (watched || by.epoch > 1) {
          this.line(
            by.workerId,
            `provider answered ${invoiceNumber}: ${event.chargeId}${event.replayed ? ' (replayed)' : ''} (token ${by.token})`,
          );
        }
        return;
      case 'ledger:written': {
        this.charged++;
        if (watched || by.epoch > 1) {
          this.line(
            by.workerId,
            `fenced transaction COMMITTED for ${invoiceNumber}: ledger entry #${event.ledgerEntryId}` +
              `${event.alreadyRecorded ? ' (already recorded by an earlier attempt)' : ''}, invoice paid (token ${by.token})`,
          );
        }
        const total = this.options.totalInvoices();
        if (this.charged % 60 === 0 || this.charged === total) {
          this.line('progress', `${this.charged}/${total} invoices charged and in the ledger`);
        }
        return;
      }
      case 'ledger:refused': {
        const error = event.error;
        const where =
          error instanceof LeaseLostError && error.operation === 'fenced-transaction'
            ? `the database's fence matched nothing: stale token ${error.staleToken}, current token ${error.currentToken ?? 'none'}`
            : error instanceof LeaseLostError
              ? `the worker refused it before sending any SQL: the database had already rejected its ${error.operation} ` +
                `(stale token ${error.staleToken}, current token ${error.currentToken ?? 'none'})`
              : error instanceof AttemptAbortedError
                ? `the worker refused it before sending any SQL: the attempt is already aborted (${error.reason})`
                : `it failed: ${describeError(error)}`;
        this.line(by.workerId, `fenced write for ${invoiceNumber} REFUSED (token ${by.token}): ${where}`);
        return;
      }
    }
  }
}
