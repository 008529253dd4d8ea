import type { NetworkLink } from '../shared/network-link.js';
import type { ObjectStore } from './object-store.js';
import type { Timeline } from './timeline.js';

/** What happened to the stalled upload. */
export interface StallRecord {
  readonly key: string;
  /** The worker whose network was cut, and the token its upload carried. */
  readonly workerId: string;
  readonly token: bigint;
  readonly partitionedAtMs: number;
  healedAtMs?: number;
  /** What the store did with the zombie's upload once it arrived. */
  outcome?: 'refused' | 'accepted';
  /** The token the store had accepted when it refused the zombie's. */
  currentToken?: bigint | null;
  /** `code` of the error the zombie's upload got back. */
  errorCode?: string;
}

/** Options of {@link StallFault}. */
export interface StallFaultOptions {
  /** The object whose first upload stalls. */
  readonly key: string;
  /** Each worker's network, by worker id. */
  readonly links: ReadonlyMap<string, NetworkLink>;
  readonly store: ObjectStore;
  readonly timeline: Timeline;
  /** Heal this long after a higher token's upload of `key` was accepted. @defaultValue 150 (ms) */
  readonly healDelayMs?: number;
  /** Heal after this long whatever happened, so that a broken run cannot hang the demo. @defaultValue 30_000 (ms) */
  readonly maxPartitionMs?: number;
}

/**
 * The demo's one fault: the first upload of `key` leaves its worker, and at that moment the worker's network is
 * cut. The worker keeps running but can reach neither the database nor the store: its heartbeats hang, its lease
 * runs out by the database clock, and another worker reclaims the step. Once the store has accepted the new
 * attempt's upload of `key`, the network heals and the old upload — still in flight — finally arrives.
 */
export class StallFault {
  record: StallRecord | undefined;
  /** Resolves once the zombie's upload reached the store (refused or, if fencing were broken, accepted). */
  readonly settled: Promise<void>;
  private settle!: () => void;
  private timers: NodeJS.Timeout[] = [];

  constructor(private readonly options: StallFaultOptions) {
    this.settled = new Promise<void>((resolve) => (this.settle = resolve));
    options.store.events.on('object:accepted', (o) => {
      const r = this.record;
      if (!r || o.key !== r.key) return;
      if (o.token === r.token) {
        r.outcome = 'accepted';
        this.settle();
      } else if (o.token > r.token && r.healedAtMs === undefined) {
        this.timers.push(setTimeout(() => this.heal(), options.healDelayMs ?? 150));
      }
    });
    options.store.events.on('object:refused', (refusal) => {
      const r = this.record;
      if (!r || refusal.key !== r.key || refusal.token !== r.token) return;
      r.outcome = 'refused';
      r.currentToken = refusal.currentToken;
      r.errorCode = refusal.error.code;
      this.settle();
    });
  }

  /** Give this to the workers' store clients (`linkStore`'s `onUpload`). */
  readonly onUpload = (upload: { key: string; token: bigint; writer: string }): void => {
    if (this.record || upload.key !== this.options.key) return;
    const link = this.options.links.get(upload.writer);
    if (!link) return;
    link.partition();
    this.record = {
      key: upload.key,
      workerId: upload.writer,
      token: upload.token,
      partitionedAtMs: this.options.timeline.elapsedMs(),
    };
    this.options.timeline.line(
      'FAULT',
      `${upload.writer}'s network is cut just as its upload of ${upload.key.split('/').slice(2).join('/')} ` +
        `(token ${upload.token}) leaves: it can reach neither the database nor the store; the upload is in flight`,
    );
    this.timers.push(setTimeout(() => this.heal(), this.options.maxPartitionMs ?? 30_000));
  };

  /** Restore the cut network (idempotent). */
  heal(): void {
    const r = this.record;
    if (!r || r.healedAtMs !== undefined) return;
    r.healedAtMs = this.options.timeline.elapsedMs();
    this.options.timeline.line(
      'FAULT',
      `${r.workerId}'s network is back after ${((r.healedAtMs - r.partitionedAtMs) / 1000).toFixed(2)} s: ` +
        'what it sent meanwhile arrives now',
    );
    this.options.links.get(r.workerId)?.heal();
  }

  dispose(): void {
    for (const t of this.timers) clearTimeout(t);
    this.heal();
  }
}
