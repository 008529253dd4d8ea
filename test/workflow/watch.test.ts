/**
 * `handle.watch()` (issue 13): a run's events as they happen, each once and in the order of `describe().events`,
 * woken by NOTIFY and resumable from a cursor.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineSignal, defineWorkflow } from '@palisade/sdk';
import type { Engine, WatchedEvent } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';

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

const step = defineSignal({ name: 'step', payload: z.null() });

/** Sets its progress to k and waits for a `step` signal, `rounds` times: each round needs the watch to see it. */
const paced = defineWorkflow({
  name: 'watched-paced',
  input: z.object({ rounds: z.number() }),
  output: z.number(),
  async run({ rounds }, ctx) {
    for (let k = 1; k <= rounds; k++) {
      ctx.setProgress({ k });
      await ctx.waitForSignal(step);
    }
    return rounds;
  },
});

const ids = (events: readonly { id: string }[]) => events.map((e) => e.id);

/** The run's watcher rows (result() and watch() calls waiting on it now). */
async function watcherRows(engine: Engine, runId: string): Promise<number> {
  const [row] = await engine.database.rows<{ n: number }>(
    sql`SELECT count(*)::int AS n FROM ${sql.raw(`"${engine.schema}"."run_watchers"`)} WHERE run_id = ${runId}::uuid`,
  );
  return row!.n;
}

/** The run row's xmin: it changes with every write of the row. */
async function runXmin(engine: Engine, runId: string): Promise<string> {
  const [row] = await engine.database.rows<{ xmin: string }>(
    sql`SELECT xmin::text AS xmin FROM ${engine.names.runs} WHERE id = ${runId}::uuid`,
  );
  return row!.xmin;
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`watch on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

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
        expect(seen.at(-1)).toMatchObject({ type: 'run:completed', stepId: null, stepName: null });
        expect(seen.filter((e) => e.type === 'run:progress').map((e) => e.data)).toEqual([
          { value: { stage: 'doubling' } },
          { value: { stage: 'waiting', doubled: [2, 4, 6] } },
          { value: { stage: 'done', by: 'watcher' } },
        ]);
        for (const type of ['step:scheduled', 'attempt:claimed', 'step:completed']) {
          expect(seen.filter((e) => e.type === type && e.stepName === 'double')).toHaveLength(3);
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
        const refused = handle.watch({ after }).next();
        await expect(refused).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
        await expect(refused).rejects.toThrow(/after.*out of range/s);
      }
      await handle.cancel('test over');
    });

    it('reads and waits without writing the run row: result() and watch() leave its xmin as it was', async () => {
      const engine = await target.engine();
      // No worker: nothing else writes the run meanwhile.
      const handle = await engine.client.start(paced, { rounds: 1 });
      const before = await runXmin(engine, handle.runId);
      await expect(handle.result({ timeoutMs: 50 })).rejects.toMatchObject({ code: 'RESULT_TIMEOUT' });
      const watching = handle.watch();
      expect((await watching.next()).value).toMatchObject({ type: 'run:started' });
      expect(await watcherRows(engine, handle.runId)).toBe(1);
      await watching.return();
      expect(await runXmin(engine, handle.runId)).toBe(before);
      await handle.cancel('test over');
    });

    it('leaves no watcher behind once result() and watch() returned', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ workflows: [paced], pollIntervalMs: 50 });
      await worker.start();
      try {
        const handle = await engine.client.start(paced, { rounds: 2 });
        for (let watch = 0; watch < 3; watch++) {
          for await (const event of handle.watch()) if (event.type === 'run:progress') break;
          await expect(handle.result({ timeoutMs: 20 })).rejects.toMatchObject({ code: 'RESULT_TIMEOUT' });
        }
        expect(await watcherRows(engine, handle.runId)).toBe(0);
        const result = handle.result({ timeoutMs: 20_000 });
        for (let k = 0; k < 2; k++) await handle.signal(step, null);
        await expect(result).resolves.toBe(2);
        expect(await watcherRows(engine, handle.runId)).toBe(0);
      } finally {
        await worker.stop();
      }
    });
  });
}

describe('watch beside other sessions (postgres)', () => {
  const target = useEngineTarget('postgres');

  it(
    'delivers every progress change while another session holds a transaction open, before it is released',
    { timeout: 60_000 }, // 8 rounds: a watch held back until that transaction is 10 s old would need 80 s
    async () => {
      const engine = await target.engine();
      const worker = engine.worker({ workflows: [paced], pollIntervalMs: 50 });
      await worker.start();
      const held = await target.sql().reserve();
      try {
        await held`BEGIN`;
        await held`SELECT txid_current()`; // an open transaction with an xid, of another session
        const rounds = 8;
        const handle = await engine.client.start(paced, { rounds });
        const order: string[] = [];
        // Only the NOTIFYs of the turns wake it: its poll interval is longer than the test.
        for await (const event of handle.watch({ pollIntervalMs: 600_000 })) {
          if (event.type === 'run:progress') {
            order.push(`progress ${(event.data as { value: { k: number } }).value.k}`);
            await handle.signal(step, null);
          }
          if (event.type === 'run:completed') order.push('completed');
        }
        await held`COMMIT`;
        order.push('released');
        expect(order).toEqual([
          ...Array.from({ length: rounds }, (_, k) => `progress ${k + 1}`),
          'completed',
          'released',
        ]);
      } finally {
        held.release();
        await worker.stop();
      }
    },
  );

  it('sends no watch NOTIFY for a run whose watchers left', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const channel = `palisade_${engine.schema}`;
    const items: string[] = [];
    let sentinel = (): void => undefined;
    await admin.listen(channel, (payload) => {
      if (payload === 'sentinel') sentinel();
      else items.push(...payload.split('\n'));
    });
    /** NOTIFYs arrive in commit order: once the sentinel sent now is here, every earlier commit's NOTIFY is too. */
    const drain = async () => {
      const drained = new Promise<void>((resolve) => (sentinel = resolve));
      await admin`SELECT pg_notify(${channel}, 'sentinel')`;
      await drained;
    };
    const worker = engine.worker({ workflows: [paced], pollIntervalMs: 50 });
    await worker.start();
    try {
      const handle = await engine.client.start(paced, { rounds: 3 });
      let waits = 0;
      for await (const event of handle.watch()) {
        if (event.type !== 'signal:waiting') continue;
        if (++waits === 2) break; // the turn after the first signal committed while it watched
        await handle.signal(step, null);
      }
      await drain();
      expect(items).toContain(`watch:${handle.runId}`); // its turns NOTIFYed while it watched
      const from = items.length;
      // The watch left; more turns commit, then the run ends with nobody waiting on it.
      const ended = new Promise<void>((resolve) =>
        worker.events.on('turn:committed', (e) => {
          if (e.outcome !== 'blocked') resolve();
        }),
      );
      for (let k = 0; k < 2; k++) await handle.signal(step, null);
      await ended;
      await drain();
      const afterLeaving = items.slice(from);
      expect(
        afterLeaving.filter((i) => i === `watch:${handle.runId}` || i === `run:${handle.runId}`),
      ).toEqual([]);
    } finally {
      await worker.stop();
    }
  });
});
