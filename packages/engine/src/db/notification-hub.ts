import { PalisadeError } from '@palisade/sdk';
import { notificationItems } from '../queries/notify.js';
import type { Database } from './database.js';

/** How a run ended, as stored: read back by the statement of this process that ended it. */
export interface EndedRun {
  readonly status: 'completed' | 'failed' | 'cancelled';
  /** The stored output (JSON), or null. */
  readonly output: unknown;
  /** The stored failure (a SerializedFailure), or null. */
  readonly error: unknown;
  readonly cancel_reason: string | null;
}

/** A subscriber: `ended` is set when the run's end comes from this process ({@link NotificationHub.endingRun}). */
export type Subscriber = (ended?: EndedRun) => void;

/**
 * What a worker tells the `handle.result()` waiters of its process: the turns it runs ({@link turnRunning}: a
 * waiter lets a turn of its run that is in progress here settle before it registers on the run) and the commits
 * that may end a run ({@link endingRun}: it gets the end from the commit).
 */
export interface LocalResults {
  /** A turn of run `runId` starts in this process; call the returned function once it settled, whatever it did. */
  turnRunning(runId: string): () => void;
  /** See {@link NotificationHub.endingRun}. */
  endingRun(runId: string): (ended?: EndedRun) => void;
}

/**
 * One LISTEN per engine, fanned out to in-process subscribers by payload (`run:<id>`, `step:<queue>`, …), so
 * many `handle.result()` calls share one connection. Subscribing before the first LISTEN starts it lazily.
 */
export class NotificationHub implements LocalResults {
  private readonly subscribers = new Map<string, Set<Subscriber>>();
  /** Runs with a turn in progress in this process: how many, and what settles when the last one does. */
  private readonly turns = new Map<string, { count: number; settled: Promise<void>; settle: () => void }>();
  /** `run:<id>` of runs a statement of this process may be ending now ({@link endingRun}). */
  private readonly ending = new Map<string, { notified: boolean }>();
  private started: Promise<() => Promise<void>> | undefined;
  /** Set by {@link close}: subscribers were woken one last time and must stop waiting. */
  closed = false;

  constructor(
    private readonly db: Database,
    private readonly channel: string,
  ) {}

  /**
   * Call `handler` whenever `payload` is notified, and once more when the hub closes; resolves (once listening)
   * to an unsubscribe function.
   * @throws PalisadeError `ENGINE_CLOSED` after {@link close}.
   */
  async subscribe(payload: string, handler: Subscriber): Promise<() => void> {
    if (this.closed)
      throw new PalisadeError('ENGINE_CLOSED', 'engine is closed; create a new one to wait for runs');
    let set = this.subscribers.get(payload);
    if (!set) this.subscribers.set(payload, (set = new Set()));
    set.add(handler);
    this.started ??= this.db.listen(this.channel, (payload) => {
      for (const item of notificationItems(payload)) {
        if (item === 'run:*') {
          for (const [key, set] of this.subscribers) {
            if (!key.startsWith('run:')) continue;
            const held = this.ending.get(key);
            if (held) held.notified = true;
            else for (const h of set) h();
          }
        } else {
          const held = this.ending.get(item);
          if (held) held.notified = true;
          else for (const h of this.subscribers.get(item) ?? []) h();
        }
      }
    });
    await this.started;
    return () => {
      set.delete(handler);
      if (set.size === 0) this.subscribers.delete(payload);
    };
  }

  turnRunning(runId: string): () => void {
    let entry = this.turns.get(runId);
    if (!entry) {
      let settle!: () => void;
      const settled = new Promise<void>((resolve) => (settle = resolve));
      this.turns.set(runId, (entry = { count: 0, settled, settle }));
    }
    entry.count++;
    const held = entry;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (--held.count > 0) return;
      if (this.turns.get(runId) === held) this.turns.delete(runId);
      held.settle();
    };
  }

  /**
   * A promise that resolves once no turn of run `runId` is in progress in this process; undefined when none is.
   * A turn that ends the run gives its waiters the end without a registration or a read (see {@link endingRun}).
   */
  localTurnsSettled(runId: string): Promise<void> | undefined {
    return this.turns.get(runId)?.settled;
  }

  /**
   * A statement of this process that may end run `runId` is about to be sent (a workflow's last turn). Until the
   * returned function is called, a NOTIFY for the run is held back (it can arrive before the statement's own
   * answer); then the run's subscribers get the end as stored, when the statement ended the run — they need
   * neither the NOTIFY nor a read of the run — or else the NOTIFY held back, if one came.
   */
  endingRun(runId: string): (ended?: EndedRun) => void {
    const key = `run:${runId}`;
    const entry = { notified: false };
    this.ending.set(key, entry);
    return (ended) => {
      if (this.ending.get(key) === entry) this.ending.delete(key);
      if (ended || entry.notified) for (const h of this.subscribers.get(key) ?? []) h(ended);
    };
  }

  /** Stop listening and wake every subscriber so that waiters see {@link closed} instead of hanging. */
  async close(): Promise<void> {
    this.closed = true;
    const started = this.started;
    this.started = undefined;
    const handlers = [...this.subscribers.values()].flatMap((set) => [...set]);
    this.subscribers.clear();
    for (const h of handlers) h();
    if (started) await (await started)();
  }
}
