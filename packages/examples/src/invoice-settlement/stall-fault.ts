import type { InvoiceActivityEvent } from './activities.js';
import type { DatabaseLink } from './database-link.js';
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
  readonly links: ReadonlyMap<string, DatabaseLink>;
  readonly timeline: Timeline;
  /** Heal and answer after this long whatever happened, so a broken run cannot hang the demo. @defaultValue 30_000 */
  readonly maxStallMs?: number;
}

/**
 * The demo's one fault. The first charge request for the chosen invoice reaches the provider, which commits the
 * charge and holds its answer (a slow card network); at that moment the requesting worker's database link is cut
 * (as if its process were paused, or its network partitioned). Its activity keeps waiting on the provider, its
 * heartbeats cannot get through, its lease runs out by the database clock, and the other worker reclaims the step,
 * charges with the same idempotency key (the provider replays the same charge) and commits the ledger entry. Then
 * the link heals and the provider finally answers the stalled request: the old attempt wakes up and tries to write
 * its ledger entry through `ctx.fencedTransaction` — which must be refused.
 */
export class StallFault {
  record: StallRecord | undefined;
  /** Resolves once the stalled attempt's fenced write ended (refused or, if fencing were broken, committed). */
  readonly settled: Promise<void>;
  private settle!: () => void;
  private readonly hold: HeldResponse;
  private firstStart: { workerId: string; token: bigint; epoch: number; stepId: string } | undefined;
  /** Fenced transactions each worker may have open (from a charge's answer to its ledger write's end). */
  private readonly openWrites = new Map<string, number>();
  private cutPending = false;
  private cutDone = false;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(private readonly options: StallFaultOptions) {
    this.settled = new Promise<void>((resolve) => (this.settle = resolve));
    this.hold = options.provider.holdFirstResponse(options.idempotencyKey);
    void this.hold.reached.then(() => this.requestCut());
  }

  /** Give every charge activity event to this (after the timeline). */
  readonly onActivityEvent = (event: InvoiceActivityEvent): void => {
    const { by } = event;
    const open = this.openWrites.get(by.workerId) ?? 0;
    if (event.type === 'charge:answered') this.openWrites.set(by.workerId, open + 1);
    if (event.type === 'ledger:written' || event.type === 'ledger:refused') {
      this.openWrites.set(by.workerId, Math.max(0, open - 1));
      if (this.cutPending && open <= 1 && by.workerId === this.firstStart?.workerId) this.cut();
    }
    if (event.invoiceNumber !== this.options.invoiceNumber) return;
    if (event.type === 'charge:started') {
      this.firstStart ??= { workerId: by.workerId, token: by.token, epoch: by.epoch, stepId: by.stepId };
      return;
    }
    const r = this.record;
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

  /**
   * Cut the link at the first moment the worker has no fenced transaction open. A cut in the middle of one would
   * leave the server holding its locks until `idle_in_transaction_session_timeout` ends the session — safe, but
   * postgres.js 3.4.9 then crashes the process when the link heals (a write scheduled on the closed connection:
   * porsager/postgres#1154, #1208), which is a fault of its own and not the one this demo is about.
   */
  private requestCut(): void {
    const worker = this.firstStart?.workerId;
    if (worker === undefined || (this.openWrites.get(worker) ?? 0) === 0) return this.cut();
    this.cutPending = true;
    // Fenced transactions take milliseconds; if none ever ends, cut anyway rather than never.
    this.timers.push(setTimeout(() => this.cut(), 10_000));
  }

  private cut(): void {
    if (this.cutDone) return;
    this.cutDone = true;
    this.cutPending = false;
    const first = this.firstStart;
    const link = first && this.options.links.get(first.workerId);
    if (!first || !link) {
      this.options.timeline.line(
        'FAULT',
        `no link for the worker charging ${this.options.invoiceNumber}; not stalling it`,
      );
      this.hold.release();
      return;
    }
    link.partition();
    this.record = {
      invoiceNumber: this.options.invoiceNumber,
      stepId: first.stepId,
      staleWorker: first.workerId,
      staleToken: first.token,
      staleEpoch: first.epoch,
      partitionedAtMs: this.options.timeline.elapsedMs(),
    };
    this.options.timeline.line(
      'FAULT',
      `${first.workerId} stalls: its database link is cut while its request for ${this.options.invoiceNumber} ` +
        `(token ${first.token}) waits on the provider; it cannot renew its lease, and does not know it`,
    );
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
