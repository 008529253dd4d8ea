import type { Logger } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Database } from '../db/database.js';
import { schemaNames } from '../queries/schema-names.js';
import { UNSERVED_WARN_REPEAT_MS, UnservedWorkMonitor } from './unserved-work-monitor.js';
import { WorkerEvents } from './worker-events.js';

describe('UnservedWorkMonitor', () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] }));
  afterEach(() => vi.useRealTimers());

  it('warns at its first check, then not at every poll, and again after the repeat interval while still due', async () => {
    let reads = 0;
    const db = {
      rows: () => {
        reads++;
        return Promise.resolve([{ kind: 'activity', name: 'charge', queue: 'payments' }]);
      },
    } as unknown as Database;
    const warnings: unknown[] = [];
    const logger = {
      warn: (o: unknown) => warnings.push(o),
      debug: () => undefined,
    } as unknown as Logger;
    const monitor = new UnservedWorkMonitor({
      db,
      names: schemaNames('palisade'),
      workerId: 'w1',
      pollIntervalMs: 1_000,
      queues: ['payments'],
      activityNames: ['refund'],
      workflowNames: [],
      events: new WorkerEvents(),
      logger,
    });
    monitor.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(reads).toBe(1);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ kind: 'activity', name: 'charge', queue: 'payments' });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(reads).toBe(61);
    expect(warnings).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(UNSERVED_WARN_REPEAT_MS);
    expect(warnings).toHaveLength(2);
    await monitor.stop();
    await vi.advanceTimersByTimeAsync(10_000);
    expect(reads).toBe(61 + UNSERVED_WARN_REPEAT_MS / 1_000);
  });
});
