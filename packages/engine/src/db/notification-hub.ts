import type { Database } from './database.js';

/**
 * One LISTEN per engine, fanned out to in-process subscribers by payload (`run:<id>`, `step:<queue>`, …), so
 * many `handle.result()` calls share one connection. Subscribing before the first LISTEN starts it lazily.
 */
export class NotificationHub {
  private readonly subscribers = new Map<string, Set<() => void>>();
  private started: Promise<() => Promise<void>> | undefined;

  constructor(
    private readonly db: Database,
    private readonly channel: string,
  ) {}

  /** Call `handler` whenever `payload` is notified; resolves (once listening) to an unsubscribe function. */
  async subscribe(payload: string, handler: () => void): Promise<() => void> {
    let set = this.subscribers.get(payload);
    if (!set) this.subscribers.set(payload, (set = new Set()));
    set.add(handler);
    this.started ??= this.db.listen(this.channel, (p) => {
      for (const h of this.subscribers.get(p) ?? []) h();
    });
    await this.started;
    return () => {
      set.delete(handler);
      if (set.size === 0) this.subscribers.delete(payload);
    };
  }

  async close(): Promise<void> {
    const started = this.started;
    this.started = undefined;
    this.subscribers.clear();
    if (started) await (await started)();
  }
}
