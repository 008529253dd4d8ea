import { PalisadeError } from '@palisade/sdk';
import { notificationItems } from '../queries/notify.js';
import type { Database } from './database.js';

/**
 * One LISTEN per engine, fanned out to in-process subscribers by payload (`run:<id>`, `step:<queue>`, …), so
 * many `handle.result()` calls share one connection. Subscribing before the first LISTEN starts it lazily.
 */
export class NotificationHub {
  private readonly subscribers = new Map<string, Set<() => void>>();
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
  async subscribe(payload: string, handler: () => void): Promise<() => void> {
    if (this.closed)
      throw new PalisadeError('ENGINE_CLOSED', 'engine is closed; create a new one to wait for runs');
    let set = this.subscribers.get(payload);
    if (!set) this.subscribers.set(payload, (set = new Set()));
    set.add(handler);
    this.started ??= this.db.listen(this.channel, (payload) => {
      for (const item of notificationItems(payload)) {
        if (item === 'run:*') {
          for (const [key, set] of this.subscribers) if (key.startsWith('run:')) for (const h of set) h();
        } else for (const h of this.subscribers.get(item) ?? []) h();
      }
    });
    await this.started;
    return () => {
      set.delete(handler);
      if (set.size === 0) this.subscribers.delete(payload);
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
