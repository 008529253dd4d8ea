import { PalisadeError } from '@palisade/sdk';
import { notificationItems } from './notification-payload.js';
import type { Database } from './database.js';
import type { TerminalRunStatus } from '../turn/state-machine.js';

/** How a run ended, as stored: read back by the statement of this process that ended it. */
export interface EndedRun {
  readonly status: TerminalRunStatus;
  /** The stored output (JSON), or null. */
  readonly output: unknown;
  /** The stored failure (a SerializedFailure), or null. */
  readonly error: unknown;
  readonly cancel_reason: string | null;
}

/** A subscriber: `ended` is set when the run's end comes from this process ({@link NotificationHub.turnRunning}). */
export type Subscriber = (ended?: EndedRun) => void;

/**
 * What a worker tells the `handle.result()` waiters of its process: each turn it runs, from its start until it
 * settled, with the run's end as stored when the turn ended the run (see {@link NotificationHub.turnRunning}).
 */
export interface LocalResults {
  turnRunning(runId: string): (ended?: EndedRun) => void;
}

/** The turns of one run in progress in this process, and what their waiters are owed when the last settles. */
interface LocalTurns {
  count: number;
  /** A NOTIFY for the run came meanwhile (held back). */
  notified: boolean;
  ended: EndedRun | undefined;
  readonly settled: Promise<void>;
  readonly settle: () => void;
}

/**
 * One LISTEN per engine, fanned out to in-process subscribers by payload (`run:<id>`, `step:<queue>`, …), so
 * many `handle.result()` calls share one connection. Subscribing before the first LISTEN starts it lazily.
 */
export class NotificationHub implements LocalResults {
  private readonly subscribers = new Map<string, Set<Subscriber>>();
  /** By `run:<id>`: runs with a turn in progress in this process ({@link turnRunning}). */
  private readonly turns = new Map<string, LocalTurns>();
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
    // A LISTEN that fails (the database is away) is forgotten, not kept: the next subscribe tries again. Kept, its
    // rejection answered every later subscribe of this engine, and result() and watch() failed until a restart.
    this.started ??= this.listen().catch((error: unknown) => {
      this.started = undefined;
      throw error;
    });
    const unsubscribe = (): void => {
      set.delete(handler);
      if (set.size === 0 && this.subscribers.get(payload) === set) this.subscribers.delete(payload);
    };
    try {
      await this.started;
    } catch (error) {
      unsubscribe();
      throw error;
    }
    return unsubscribe;
  }

  private listen(): Promise<() => Promise<void>> {
    return this.db.listen(this.channel, (payload) => {
      for (const item of notificationItems(payload)) {
        if (item === 'run:*') {
          for (const [key, set] of this.subscribers) {
            if (!key.startsWith('run:')) continue;
            const held = this.turns.get(key);
            if (held) held.notified = true;
            else for (const h of set) h();
          }
        } else {
          const held = this.turns.get(item);
          if (held) held.notified = true;
          else for (const h of this.subscribers.get(item) ?? []) h();
        }
      }
    });
  }

  /**
   * A turn of run `runId` starts in this process; call the returned function once it settled, with the run's end
   * as stored when the turn's commit ended the run. Meanwhile a NOTIFY for the run is held back (it can arrive
   * before the commit's own answer). When the run's last turn here settles, its subscribers get the end — they
   * need neither the NOTIFY nor a read of the run — or else the NOTIFY held back, if one came.
   */
  turnRunning(runId: string): (ended?: EndedRun) => void {
    const key = `run:${runId}`;
    let entry = this.turns.get(key);
    if (!entry) {
      let settle!: () => void;
      const settled = new Promise<void>((resolve) => (settle = resolve));
      this.turns.set(key, (entry = { count: 0, notified: false, ended: undefined, settled, settle }));
    }
    entry.count++;
    const held = entry;
    let done = false;
    return (ended) => {
      if (done) return;
      done = true;
      held.ended ??= ended;
      if (--held.count > 0) return;
      if (this.turns.get(key) === held) this.turns.delete(key);
      if (held.ended || held.notified) for (const h of this.subscribers.get(key) ?? []) h(held.ended);
      held.settle();
    };
  }

  /**
   * A promise that resolves once no turn of run `runId` is in progress in this process; undefined when none is.
   * A turn that ends the run gives its waiters the end without a registration or a read (see {@link turnRunning}).
   */
  localTurnsSettled(runId: string): Promise<void> | undefined {
    return this.turns.get(`run:${runId}`)?.settled;
  }

  /** Stop listening and wake every subscriber so that waiters see {@link closed} instead of hanging. */
  async close(): Promise<void> {
    this.closed = true;
    const started = this.started;
    this.started = undefined;
    const handlers = [...this.subscribers.values()].flatMap((set) => [...set]);
    this.subscribers.clear();
    for (const h of handlers) h();
    // Unlistening is a courtesy (the connection closes next): a LISTEN that failed, or a database that is away,
    // must not make close() throw.
    if (started) await started.then((unlisten) => unlisten()).catch(() => undefined);
  }
}
