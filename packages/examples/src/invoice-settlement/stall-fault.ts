import type { InvoiceActivityEvent } from './activities.js';
import type { NetworkLink } from '../shared/network-link.js';
import type { HeldResponse, PaymentProvider } from './payment-provider.js';
import type { Timeline } from './timeline.js';

/** What happened to the stalled invoice. */
export interface StallRecord {
  readonly invoiceNumber: string;
  /** The step that charges it. */
  readonly stepId: string;
  /** The worker that stalled, and its attempt. */
  readonly staleWorker: string;
  readonly staleToken: bigint;
  readonly staleEpoch: number;
  readonly partitionedAtMs: number;
  healedAtMs?: number;
  /** The attempt that finished the invoice while the stalled one waited. */
  takeover?: {
    readonly workerId: string;
    readonly token: bigint;
    readonly epoch: number;
    readonly ledgerEntryId: number;
  };
  /** How the stalled attempt's own fenced write ended once it woke up. */
  outcome?: 'refused' | 'committed';
  /** What its `ctx.fencedTransaction` threw. */
  error?: unknown;
}

/** Options of {@link StallFault}. */
export interface StallFaultOptions {
  readonly invoiceNumber: string;
  readonly idempotencyKey: string;
  readonly provider: PaymentProvider;
  /** Each charge worker's database link, by worker id. */
  readonly links: ReadonlyMap<string, NetworkLink>;
  /** Where the fault's lines go (the invoice demo's timeline, or any with the same two methods). */
  readonly timeline: Pick<Timeline, 'line' | 'elapsedMs'>;
  /** Heal and answer after this long whatever happened, so a broken run cannot hang the demo. @defaultValue 30_000 */
  readonly maxStallMs?: number;
}

/**
 * The demo's one fault. As the first attempt at the chosen invoice starts, its worker stalls: its database link is
 * cut (as if its process were paused, or its network partitioned), and the provider, which commits the charge
 * request as usual, holds its answer (a slow card network). The activity keeps waiting on the provider, its
 * heartbeats cannot get through, its lease runs out by the database clock, and the other worker reclaims the step,
 * charges with the same idempotency key (the provider replays the same charge) and commits the ledger entry. Then
 * the link heals and the provider finally answers: the old attempt wakes up and tries to write its ledger entry
 * through `ctx.fencedTransaction` — which must be refused.
 *
 * The link is cut at the attempt's start, before its lease could be lost any other way (a busy machine can delay
 * heartbeats too), and the charge workers run one attempt at a time, so the cut never catches a transaction open:
 * the server would end such a session (`idle_in_transaction_session_timeout`), and postgres.js 3.4.9 then crashes
 * the process when the link heals (porsager/postgres#1154, #1208) — a fault of its own, not the one shown here.
 */
export class StallFault {
  record: StallRecord | undefined;
  /** Resolves once the stalled attempt's fenced write ended (refused or, if fencing were broken, committed). */
  readonly settled: Promise<void>;
  private settle!: () => void;
  private readonly hold: HeldResponse;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(private readonly options: StallFaultOptions) {
    this.settled = new Promise<void>((resolve) => (this.settle = resolve));
    this.hold = options.provider.holdFirstResponse(options.idempotencyKey);
  }

  /** Give every charge activity event to this (after the timeline). */
  readonly onActivityEvent = (event: InvoiceActivityEvent): void => {
    if (event.invoiceNumber !== this.options.invoiceNumber) return;
    const { by } = event;
    const r = this.record;
    if (event.type === 'charge:started') {
      if (!r) this.cut(by);
      return;
    }
    if (!r) return;
    const stale = by.token === r.staleToken;
    if (event.type === 'ledger:written' && !stale && !r.takeover) {
      r.takeover = {
        workerId: by.workerId,
        token: by.token,
        epoch: by.epoch,
        ledgerEntryId: event.ledgerEntryId,
      };
      this.timers.push(setTimeout(() => this.wake(), 150));
    } else if (event.type === 'ledger:written' && stale) {
      r.outcome = 'committed';
      this.settle();
    } else if (event.type === 'ledger:refused' && stale) {
      r.outcome = 'refused';
      r.error = event.error;
      this.settle();
    }
  };

  private cut(by: { workerId: string; stepId: string; token: bigint; epoch: number }): void {
    this.record = {
      invoiceNumber: this.options.invoiceNumber,
      stepId: by.stepId,
      staleWorker: by.workerId,
      staleToken: by.token,
      staleEpoch: by.epoch,
      partitionedAtMs: this.options.timeline.elapsedMs(),
    };
    const link = this.options.links.get(by.workerId);
    if (!link) {
      this.options.timeline.line(
        'FAULT',
        `${by.workerId} has no database link to cut; the provider still holds its answer`,
      );
    } else {
      link.partition();
      this.options.timeline.line(
        'FAULT',
        `${by.workerId} stalls on ${this.options.invoiceNumber} (token ${by.token}): its database link is cut as its ` +
          'request leaves for the provider; it cannot renew its lease, and does not know it',
      );
    }
    this.timers.push(setTimeout(() => this.wake(), this.options.maxStallMs ?? 30_000));
  }

  /** Heal the stalled worker's link, then let the provider answer its held request (idempotent). */
  private wake(): void {
    const r = this.record;
    if (!r || r.healedAtMs !== undefined) return;
    r.healedAtMs = this.options.timeline.elapsedMs();
    this.options.timeline.line(
      'FAULT',
      `${r.staleWorker} wakes after ${((r.healedAtMs - r.partitionedAtMs) / 1000).toFixed(2)} s: its link heals ` +
        '(what it sent meanwhile arrives now) and the provider answers its request',
    );
    this.options.links.get(r.staleWorker)?.heal();
    this.hold.release();
  }

  dispose(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.wake();
    this.hold.release();
  }
}
