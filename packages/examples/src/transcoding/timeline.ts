import type { Worker } from '@palisade/engine';
import type { TranscodingEvent } from './activities.js';
import type { ObjectStore } from './object-store.js';

/**
 * The demo's live timeline: one line per thing worth seeing — claims with epoch and token, reclaims, progress,
 * lost heartbeats, aborts, uploads the store accepted or refused, stale writes the engine rejected — stamped
 * with the time since the demo started.
 */
export class Timeline {
  private readonly startedAt = performance.now();
  /** stepId → what the step works on, e.g. `seg-001@240p` (known once an attempt started). */
  private readonly labels = new Map<string, string>();
  /** stepId → the token of its latest attempt that started. */
  private readonly tokens = new Map<string, bigint>();
  /** stepId → the last progress its previous attempts reported. */
  private readonly percents = new Map<string, number>();
  /** `${stepId}:${token}` → the last progress bucket printed. */
  private readonly buckets = new Map<string, number>();
  /** Workers whose heartbeats are failing (one line per streak, not per retry). */
  private readonly failing = new Set<string>();
  /** Tokens whose attempt recorded a failure (its step is then retried, not reclaimed). */
  private readonly failed = new Set<bigint>();

  constructor(private readonly log: (line: string) => void) {}

  /** ms since the timeline started. */
  elapsedMs(): number {
    return performance.now() - this.startedAt;
  }

  line(actor: string, text: string): void {
    const at = `+${(this.elapsedMs() / 1000).toFixed(2)}s`.padStart(8);
    this.log(`${at}  ${actor.padEnd(12)} ${text}`);
  }

  /** Label of a step for humans. */
  label(stepId: string, fallback: string): string {
    return this.labels.get(stepId) ?? fallback;
  }

  /** Print what a worker does with its attempts and leases. */
  watchWorker(worker: Worker, workerId: string): void {
    const e = worker.events;
    const name = (a: { stepId: string; stepLabel: string }): string => this.label(a.stepId, a.stepLabel);
    e.on('attempt:completed', ({ attempt }) =>
      this.line(workerId, `completed ${name(attempt)} (token ${attempt.token})`),
    );
    e.on('attempt:failed', ({ attempt, failure, retry }) => {
      this.failed.add(attempt.token);
      this.line(
        workerId,
        `failed ${name(attempt)} (token ${attempt.token}): ${failure.type}: ${failure.message}${retry ? ' — will retry' : ''}`,
      );
    });
    e.on('attempt:aborted', ({ attempt, reason }) => {
      const why =
        reason === 'lease-expired-locally'
          ? 'no heartbeat got through before the local lease deadline'
          : reason === 'lease-lost'
            ? 'the database rejected its lease'
            : reason;
      this.line(workerId, `signal fired for ${name(attempt)} (token ${attempt.token}): ${reason} — ${why}`);
    });
    e.on('attempt:released', ({ attempt, why }) =>
      this.line(workerId, `released ${name(attempt)} (token ${attempt.token}) unstarted: ${why}`),
    );
    e.on('attempt:stale-rejected', ({ attempt, error }) => {
      const why =
        error.currentToken !== null && error.currentToken !== error.staleToken
          ? `token ${error.staleToken} was superseded by token ${error.currentToken}`
          : `token ${error.staleToken} no longer holds a lease (${error.reason})`;
      this.line(workerId, `${error.operation} REJECTED for ${name(attempt)}: ${why}`);
    });
    e.on('heartbeat:failed', ({ error }) => {
      if (this.failing.has(workerId)) return;
      this.failing.add(workerId);
      this.line(workerId, `heartbeat failed: ${error instanceof Error ? error.message : String(error)}`);
    });
    e.on('heartbeat:sent', ({ lost }) => {
      if (this.failing.delete(workerId)) this.line(workerId, 'heartbeats get through again');
      if (lost > 0) this.line(workerId, `heartbeat: ${lost} lease(s) lost`);
    });
  }

  /** Print every write the object store accepts or refuses. */
  watchStore(store: ObjectStore, shortKey: (key: string) => string): void {
    store.events.on('object:accepted', (o) =>
      this.line('store', `accepted ${shortKey(o.key)} token ${o.token} from ${o.writer} (${o.bytes} B)`),
    );
    store.events.on('object:refused', (r) =>
      this.line(
        'store',
        `REFUSED ${shortKey(r.key)} token ${r.token} from ${r.writer}: token ${r.currentToken ?? '?'} was accepted before (${r.error.code})`,
      ),
    );
  }

  /** Print what the activities report: starts (claims and reclaims) and progress. */
  activity(event: TranscodingEvent): void {
    if (event.type === 'attempt:started') {
      const before = this.tokens.get(event.stepId);
      this.labels.set(event.stepId, event.label);
      this.tokens.set(event.stepId, event.token);
      if (before === undefined) {
        this.line(event.workerId, `claimed ${event.label}: epoch ${event.epoch}, token ${event.token}`);
      } else if (this.failed.has(before)) {
        this.line(
          event.workerId,
          `retrying ${event.label}: epoch ${event.epoch}, token ${event.token} (token ${before} failed)`,
        );
      } else {
        const percent = this.percents.get(event.stepId);
        this.line(
          event.workerId,
          `RECLAIMED ${event.label}: epoch ${event.epoch}, token ${event.token} (token ${before}'s lease expired` +
            `${percent === undefined ? '' : ` after it reported ${percent}%`}); starting over`,
        );
      }
      return;
    }
    this.percents.set(event.stepId, event.percent);
    // Two lines per attempt at most (half-way and done), so that progress shows without drowning the rest.
    const bucket = event.percent >= 100 ? 2 : event.percent >= 50 ? 1 : 0;
    const key = `${event.stepId}:${event.token}`;
    if (bucket === 0 || (this.buckets.get(key) ?? 0) >= bucket) return;
    this.buckets.set(key, bucket);
    this.line(event.workerId, `${event.label} ${event.percent}% (token ${event.token})`);
  }
}
