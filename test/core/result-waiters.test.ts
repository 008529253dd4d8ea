/**
 * A run's end is NOTIFYed only to those who wait for it (issue 12: no NOTIFY where nobody can be waiting — every
 * NOTIFY holds PostgreSQL's one notify lock until COMMIT, serializing the commits behind it): `handle.result()`
 * registers on the run (a `run_watchers` row while it waits), and the statement that ends a run names it in its
 * NOTIFY only when one has.
 */
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { defineActivity } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { gate } from '../worker/helpers.js';
import { pollFor } from '../support/wait.js';

const go = gate();
const job = defineActivity({
  name: 'job',
  input: z.object({ k: z.number(), wait: z.boolean() }),
  output: z.number(),
  run: async ({ k, wait }) => {
    if (wait) await go.promise;
    return k;
  },
});

describe('run NOTIFYs for result waiters only', () => {
  const target = useEngineTarget('postgres');

  it('ends unwatched runs without naming them, and wakes a waiter in another engine', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const payloads: string[] = [];
    let sawRunItem = (): void => undefined;
    const runItemSeen = new Promise<void>((resolve) => (sawRunItem = resolve));
    // NOTIFYs reach every listener in commit order: once this one sees the watched run's, it has seen all before.
    await admin.listen(`palisade_${engine.schema}`, (payload) => {
      payloads.push(payload);
      if (payload.split('\n').some((i) => i.startsWith('run:'))) sawRunItem();
    });
    const worker = engine.worker({ activities: [job], concurrency: 4 });
    await worker.start();

    // Listen before enqueueing: the worker may complete the first job before the last enqueue returns.
    const completed = new Set<string>();
    let sawCompletion = (): void => undefined;
    worker.events.on('attempt:completed', (e) => {
      completed.add(e.attempt.runId);
      sawCompletion();
    });
    const unwatched = await Promise.all([1, 2, 3].map((k) => engine.client.enqueue(job, { k, wait: false })));
    while (!unwatched.every((h) => completed.has(h.runId))) {
      await new Promise<void>((resolve) => (sawCompletion = resolve));
    }

    // A waiter with no worker in its engine: only the NOTIFY can wake it (its poll interval is an hour).
    const waiterEngine = await target.engine({ schema: engine.schema, migrate: false });
    const watched = await engine.client.enqueue(job, { k: 4, wait: true });
    const result = waiterEngine.client
      .getHandle<number>(watched.runId)
      .result({ pollIntervalMs: '1h', timeoutMs: 30_000 });
    await pollFor('the waiter to register on its run', async () => {
      const [row] = await admin<{ n: number }[]>`
        SELECT count(*)::int AS n FROM ${admin(engine.schema)}.run_watchers WHERE run_id = ${watched.runId}`;
      return row && row.n > 0 ? true : undefined;
    });
    go.open();
    await expect(result).resolves.toBe(4);
    await runItemSeen;

    const items = payloads.flatMap((p) => p.split('\n'));
    expect(items.filter((i) => i.startsWith('run:'))).toEqual([`run:${watched.runId}`]);
    await worker.stop();
  });
});
