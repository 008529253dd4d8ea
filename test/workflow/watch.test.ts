/**
 * `handle.watch()` (issue 13): a run's events as they happen, each once and in the order of `describe().events`,
 * woken by NOTIFY and resumable from a cursor.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineSignal, defineWorkflow } from '@palisade/sdk';
import type { WatchedEvent } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { warmUp } from './workflow-rows.js';

const go = defineSignal({ name: 'go', payload: z.object({ by: z.string() }) });

const double = defineActivity({
  name: 'double',
  input: z.number(),
  output: z.number(),
  run: (n) => Promise.resolve(n * 2),
});

/** Three steps at once (their claims and completions commit in any order), progress, a signal wait, a timer. */
const fanOut = defineWorkflow({
  name: 'watched-fan-out',
  input: z.object({ n: z.number() }),
  output: z.number(),
  async run({ n }, ctx) {
    ctx.setProgress({ stage: 'doubling' });
    const doubled = await Promise.all([ctx.run(double, n), ctx.run(double, n + 1), ctx.run(double, n + 2)]);
    ctx.setProgress({ stage: 'waiting', doubled });
    const { by } = await ctx.waitForSignal(go);
    await ctx.sleep(5);
    ctx.setProgress({ stage: 'done', by });
    return doubled.reduce((a, b) => a + b, 0);
  },
});

const ids = (events: readonly { id: string }[]) => events.map((e) => e.id);

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`watch on ${driver}`, () => {
    const target = useEngineTarget(driver);
    warmUp(target);

    it('yields every event once, in history order, woken by NOTIFY (not its poll), through a signal wait to the end', async () => {
      const engine = await target.engine();
      const workers = [0, 1].map(() =>
        engine.worker({ workflows: [fanOut], activities: [double], pollIntervalMs: 50, concurrency: 4 }),
      );
      await Promise.all(workers.map((w) => w.start()));
      try {
        const handle = await engine.client.start(fanOut, { n: 1 });
        const seen: WatchedEvent[] = [];
        // A poll interval longer than the test's timeout: only the NOTIFYs of the turns and of the end wake it.
        for await (const event of handle.watch({ pollIntervalMs: 600_000 })) {
          seen.push(event);
          if (event.type === 'signal:waiting') await handle.signal(go, { by: 'watcher' });
        }
        await expect(handle.result({ timeoutMs: 5_000 })).resolves.toBe(12);
        const described = (await handle.describe()).events;
        expect(ids(seen)).toEqual(ids(described));
        expect(new Set(ids(seen)).size).toBe(seen.length);
        expect(seen.at(-1)).toMatchObject({ type: 'run:completed', step_id: null, step_name: null });
        expect(seen.filter((e) => e.type === 'run:progress').map((e) => e.data)).toEqual([
          { value: { stage: 'doubling' } },
          { value: { stage: 'waiting', doubled: [2, 4, 6] } },
          { value: { stage: 'done', by: 'watcher' } },
        ]);
        for (const type of ['step:scheduled', 'attempt:claimed', 'step:completed']) {
          expect(seen.filter((e) => e.type === type && e.step_name === 'double')).toHaveLength(3);
        }
        expect(seen.map((e) => e.type)).toEqual(
          expect.arrayContaining(['signal:waiting', 'signal:received']),
        );
      } finally {
        await Promise.all(workers.map((w) => w.stop()));
      }
    });

    it('resumes after any cursor with exactly the events after it, and watches an ended run to its end', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ workflows: [fanOut], activities: [double], pollIntervalMs: 50 });
      await worker.start();
      try {
        const handle = await engine.client.start(fanOut, { n: 5 });
        const first: WatchedEvent[] = [];
        for await (const event of handle.watch()) {
          first.push(event);
          if (event.type === 'signal:waiting') break; // leaving early holds nothing
        }
        const rest: WatchedEvent[] = [];
        const cursor = first.at(-1)!.cursor;
        const resumed = (async () => {
          for await (const event of handle.watch({ after: cursor })) rest.push(event);
        })();
        await handle.signal(go, { by: 'resume' });
        await resumed;
        const all = (await handle.describe()).events;
        expect([...ids(first), ...ids(rest)]).toEqual(ids(all));
        // An ended run: everything, then the iterator ends; from a middle cursor, what follows it.
        const again: WatchedEvent[] = [];
        for await (const event of handle.watch()) again.push(event);
        expect(ids(again)).toEqual(ids(all));
        const middle = again[Math.floor(again.length / 2)]!;
        const tail: string[] = [];
        for await (const event of handle.watch({ after: middle.cursor })) tail.push(event.id);
        expect(tail).toEqual(ids(all).slice(Math.floor(again.length / 2) + 1));
      } finally {
        await worker.stop();
      }
    });

    it('refuses an unknown run and a cursor it did not make, naming them', async () => {
      const engine = await target.engine();
      const unknown = engine.client.getHandle('00000000-0000-4000-8000-000000000000');
      await expect(unknown.watch().next()).rejects.toMatchObject({ code: 'RUN_NOT_FOUND' });
      const handle = await engine.client.start(fanOut, { n: 0 });
      await expect(handle.watch({ after: 'page-2' }).next()).rejects.toThrow(/after.*not a cursor.*page-2/s);
      await expect(handle.watch({ pollIntervalMs: 1 }).next()).rejects.toThrow(/pollIntervalMs/);
      const watching = handle.watch();
      const first = await watching.next();
      await watching.return();
      const other = await engine.client.start(fanOut, { n: 0 });
      await expect(other.watch({ after: first.value!.cursor }).next()).rejects.toThrow(
        /after.*a cursor of another run's events, not of run/s,
      );
      await other.cancel('test over');
      await handle.cancel('test over');
    });

    it('refuses a cursor whose numbers are out of range with INVALID_OPTIONS naming it, not a database error', async () => {
      const engine = await target.engine();
      const handle = await engine.client.start(fanOut, { n: 0 });
      const watching = handle.watch();
      const first = (await watching.next()).value!;
      await watching.return();
      const [w1, run, atUs, rank, ord, id] = first.cursor.split('.');
      const forged = [
        [w1, run, '9999999999999999999', rank, ord, id], // past bigint
        [w1, run, '9223372036854775807', rank, ord, id], // a bigint, but past any timestamp
        [w1, run, atUs, rank, '-9999999999999999999', id],
      ].map((parts) => parts.join('.'));
      for (const after of forged) {
        await expect(handle.watch({ after }).next()).rejects.toMatchObject({
          code: 'INVALID_OPTIONS',
          message: expect.stringMatching(/after.*out of range/s),
        });
      }
      await handle.cancel('test over');
    });
  });
}
