/**
 * Flow control (issue 14): per-key concurrency on `enqueue`, `ctx.run` and `start`, enforced by the claim
 * statements without holding back other keys, and per-key rate limits of activity starts, by the database clock.
 * The audits read the attempts and steps tables (../support/flow-audit.ts), not the engine's counters. The same
 * limits under several worker processes: ../cases/concurrency-keys-processes.test.ts.
 */
import { EventEmitter } from 'node:events';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { advanceClock } from '@palisade/engine/testing';
import { defineActivity, defineSignal, defineWorkflow, isPalisadeError } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { claimTimesMs, maxInWindow, maxRunningPerKey, runningNowPerKey } from '../support/flow-audit.js';
import { stepsOf, stepOfKindReached } from '../workflow/workflow-rows.js';
import { gate, workerEvent, type Gate } from './helpers.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputActivity } from '../fixtures/no-input.js';
import { echoActivity, pureActivity } from '../fixtures/pure-activity.js';

const go = defineSignal({ name: 'go', payload: z.null() });

const note = echoActivity('note', z.number());

/** A keyed workflow run that schedules a step under a concurrency key and a rate key, then ends. */
const keyed = defineWorkflow({
  name: 'keyed',
  input: z.number(),
  output: z.number(),
  run: (n, ctx) =>
    ctx.run(note, n, {
      concurrency: { key: 'k', limit: 1 },
      rateLimit: { key: 'k', limit: 100, periodMs: '1s' },
    }),
});

/** The flow-control keys stored now. */
async function flowKeys(engine: Engine): Promise<string[]> {
  const rows = await engine.database.rows<{ key: string }>(
    sql`SELECT key FROM ${engine.names.flowKeys} ORDER BY key`,
  );
  return rows.map((r) => r.key);
}

const HOUR_MS = 3_600_000;

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`flow control on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('runs at most the limit of one key at once and never holds back the other keys', async () => {
      const engine = await target.engine();
      const held: { key: string; n: number; g: Gate; opened: boolean }[] = [];
      const starts = { events: new EventEmitter() };
      const hold = defineActivity({
        name: 'hold',
        input: z.object({ key: z.string(), n: z.number() }),
        output: z.string(),
        async run({ key, n }) {
          const g = gate();
          held.push({ key, n, g, opened: false });
          // A start is no event of the worker's own that checkOnEvents() hears: tell it.
          starts.events.emit('attempt:completed');
          await g.promise;
          return `${key}#${n}`;
        },
      });
      // Key A first and at a higher priority: 12 steps at the head of the queue, limit 1.
      const a = await engine.client.enqueueMany(
        hold,
        Array.from({ length: 12 }, (_, n) => ({ key: 'A', n })),
        { concurrency: { key: 'A', limit: 1 }, priority: 5 },
      );
      const b = await engine.client.enqueueMany(
        hold,
        Array.from({ length: 6 }, (_, n) => ({ key: 'B', n })),
        { concurrency: { key: 'B', limit: 3 } },
      );
      const total = { A: 12, B: 6 } as Record<string, number>;
      const limit = { A: 1, B: 3 } as Record<string, number>;
      const started = (key: string) => held.filter((h) => h.key === key).length;
      const opened = (key: string) => held.filter((h) => h.key === key && h.opened).length;
      const worker = await startWorker(engine, [hold], { concurrency: 8, pollIntervalMs: 50 });
      // A's first step and B's first three run, although A's eleven others sit ahead of B's in the queue.
      await checkOnEvents(
        [worker, starts],
        () => started('A') === 1 && started('B') === 3,
        'one of A and three of B',
      );
      expect(await runningNowPerKey(engine, 'hold')).toEqual({ A: 1, B: 3 });
      // Each step that ends gives its place to the next of its key, and only of its key.
      for (let done = 0; done < 18; done++) {
        const next = held.find((h) => !h.opened);
        if (!next) throw new Error(`nothing running after ${done} steps`);
        next.opened = true;
        next.g.open();
        const { key } = next;
        await checkOnEvents(
          [worker, starts],
          () => started(key) === Math.min(total[key] ?? 0, opened(key) + (limit[key] ?? 0)),
          `the place of ${key}#${next.n} taken`,
        );
        const now = await runningNowPerKey(engine, 'hold');
        expect(now.A ?? 0).toBeLessThanOrEqual(1);
        expect(now.B ?? 0).toBeLessThanOrEqual(3);
      }
      await expect(
        Promise.all([...a, ...b].map((h) => h.result({ timeoutMs: 15_000 }))),
      ).resolves.toHaveLength(18);
      expect(await maxRunningPerKey(engine, 'hold')).toEqual({ A: 1, B: 3 });
      await worker.stop();
    });

    it('limits ctx.run calls of one key across runs, and starts the next when one ends', async () => {
      const engine = await target.engine();
      let running = 0;
      let most = 0;
      const refund = defineActivity({
        name: 'refund',
        input: z.object({ customer: z.string() }),
        output: z.null(),
        async run() {
          most = Math.max(most, ++running);
          await new Promise((resolve) => setTimeout(resolve, 20));
          running--;
          return null;
        },
      });
      const settle = defineWorkflow({
        name: 'settle',
        input: z.object({ customer: z.string() }),
        output: z.number(),
        async run({ customer }, ctx) {
          await Promise.all(
            [1, 2, 3].map(() => ctx.run(refund, { customer }, { concurrency: { key: customer, limit: 1 } })),
          );
          return 3;
        },
      });
      const worker = await startWorker(engine, [settle, refund], { concurrency: 10, pollIntervalMs: 50 });
      const handles = await engine.client.startMany(settle, [
        { customer: 'c1' },
        { customer: 'c1' },
        { customer: 'c2' },
      ]);
      await expect(Promise.all(handles.map((h) => h.result({ timeoutMs: 20_000 })))).resolves.toEqual([
        3, 3, 3,
      ]);
      // Nine refunds, one at a time per customer: never all of c1's six, nor c1's with c2's beyond two.
      expect(await maxRunningPerKey(engine, 'refund')).toEqual({ c1: 1, c2: 1 });
      expect(most).toBeLessThanOrEqual(2);
      await worker.stop();
    });

    it('keeps a workflow run pending until a run of its key ends, sleeps and waits included', async () => {
      const engine = await target.engine();
      const session = defineWorkflow({
        name: 'session',
        input: z.object({ n: z.number() }),
        output: z.number(),
        async run({ n }, ctx) {
          await ctx.sleep('1s');
          await ctx.waitForSignal(go);
          return n;
        },
      });
      const worker = await startWorker(engine, [session], { concurrency: 10, pollIntervalMs: 50 });
      const t1 = await engine.client.startMany(
        session,
        [0, 1, 2, 3, 4].map((n) => ({ n })),
        { concurrency: { key: 'tenant-1', limit: 2 } },
      );
      const other = await engine.client.start(
        session,
        { n: 9 },
        { concurrency: { key: 'tenant-2', limit: 1 } },
      );
      const statuses = async () => Promise.all(t1.map(async (h) => (await h.describe()).run.status));
      const started = async (h: (typeof t1)[number]) => (await stepsOf(engine, h.runId)).length > 0;
      await checkOnEvents(
        [worker],
        async () => (await Promise.all([...t1, other].map(started))).filter(Boolean).length === 3,
        'two runs of tenant-1 and the run of tenant-2 asleep',
      );
      expect((await statuses()).sort()).toEqual(['pending', 'pending', 'pending', 'running', 'running']);
      expect((await other.describe()).run.status).toBe('running');
      // The sleeps end (time travel); the waits hold the places: still two.
      await advanceClock(engine, 1_500);
      await stepOfKindReached([worker], engine, other.runId, 'signal', 'the wait of tenant-2');
      expect((await statuses()).filter((s) => s === 'running')).toHaveLength(2);
      const first = [];
      for (const h of t1) if (await started(h)) first.push(h);
      expect(first).toHaveLength(2);
      await first[0]?.signal(go, null);
      await checkOnEvents(
        [worker],
        async () => (await Promise.all(t1.map(started))).filter(Boolean).length === 3,
        'a third run of tenant-1 started',
      );
      expect((await statuses()).sort()).toEqual(['completed', 'pending', 'pending', 'running', 'running']);
      await worker.stop();
    });

    it('starts at most the rate limit of a key per period, by the database clock', async () => {
      const engine = await target.engine();
      const call = pureActivity('call-api', z.object({ n: z.number() }), z.number(), ({ n }) => n, {
        rateLimit: { limit: 3, periodMs: '10s' },
      });
      const worker = workerFor(engine, [call], { concurrency: 10, pollIntervalMs: 50 });
      const handles = await engine.client.enqueueMany(
        call,
        Array.from({ length: 7 }, (_, n) => ({ n })),
      );
      // Another key has its own window.
      const own = await engine.client.enqueue(
        call,
        { n: 100 },
        { rateLimit: { key: 'own', limit: 1, periodMs: '10s' } },
      );
      await worker.start();
      const done = async () =>
        (await Promise.all([...handles, own].map(async (h) => (await h.describe()).run.status))).filter(
          (s) => s === 'completed',
        ).length;
      await checkOnEvents([worker], async () => (await done()) === 4, 'three starts and the other key');
      expect(await claimTimesMs(engine, 'call-api')).toHaveLength(4);
      // The others wait for the window, holding no lease: scheduled, due when the first start leaves it.
      await advanceClock(engine, 10_000);
      await checkOnEvents([worker], async () => (await done()) === 7, 'three more after one period');
      await advanceClock(engine, 10_000);
      await expect(Promise.all(handles.map((h) => h.result({ timeoutMs: 15_000 })))).resolves.toEqual([
        0, 1, 2, 3, 4, 5, 6,
      ]);
      expect(await claimTimesMs(engine, 'call-api')).toHaveLength(8);
      // The default key's seven starts: three, three and one, at most three in any 10 s of database time.
      const times = await claimTimesMs(engine, 'call-api', '');
      expect(times).toHaveLength(7);
      expect(maxInWindow(times, 10_000)).toBe(3);
      await worker.stop();
    });

    it('starts the next step and the next run of a full key when one ends, without waiting for a poll', async () => {
      const engine = await target.engine();
      const quick = pureActivity('quick', z.object({ n: z.number() }), z.number(), ({ n }) => n);
      const brief = defineWorkflow({
        name: 'brief',
        input: z.object({ n: z.number() }),
        output: z.number(),
        run: ({ n }) => Promise.resolve(n),
      });
      // One poll a minute: each of these would wait for it if an ending woke no claim.
      const worker = await startWorker(engine, [quick, brief], { concurrency: 4, pollIntervalMs: 60_000 });
      const five = [0, 1, 2, 3, 4].map((n) => ({ n }));
      const jobs = await engine.client.enqueueMany(quick, five, { concurrency: { key: 'k', limit: 1 } });
      const runs = await engine.client.startMany(brief, five, { concurrency: { key: 'k', limit: 1 } });
      await expect(Promise.all(jobs.map((h) => h.result({ timeoutMs: 20_000 })))).resolves.toEqual([
        0, 1, 2, 3, 4,
      ]);
      await expect(Promise.all(runs.map((h) => h.result({ timeoutMs: 20_000 })))).resolves.toEqual([
        0, 1, 2, 3, 4,
      ]);
      expect(await maxRunningPerKey(engine, 'quick')).toEqual({ k: 1 });
      await worker.stop();
    });

    it('does not report work waiting for its key as unclaimed', async () => {
      const engine = await target.engine();
      const release = gate();
      const slow = noInputActivity('slow', z.null(), async () => {
        await release.promise;
        return null;
      });
      const worker = await startWorker(engine, [slow], { pollIntervalMs: 50 });
      // checkOnEvents() hears no start: wait for the worker's own event.
      const started = workerEvent(worker, 'attempt:started');
      const first = await engine.client.enqueue(slow, {}, { concurrency: { key: 'k', limit: 1 } });
      await started;
      expect(await runningNowPerKey(engine, 'slow')).toEqual({ k: 1 });
      const second = await engine.client.enqueue(slow, {}, { concurrency: { key: 'k', limit: 1 } });
      // No worker serves this queue: that one is unclaimed.
      const orphan = await engine.client.enqueue(slow, {}, { queue: 'nobody' });
      expect((await second.describe({ unclaimedAfterMs: 0 })).unclaimed).toEqual([]);
      expect((await orphan.describe({ unclaimedAfterMs: 0 })).unclaimed).toMatchObject([
        { kind: 'activity', name: 'slow', queue: 'nobody' },
      ]);
      const shown = await second.describe();
      expect(shown.steps[0]?.concurrency).toEqual({ key: 'k', limit: 1 });
      release.open();
      await expect(Promise.all([first, second].map((h) => h.result({ timeoutMs: 15_000 })))).resolves.toEqual(
        [null, null],
      );
      await worker.stop();
    });

    it('deletes the keys no live work holds when runs are pruned, and the next work of a key inserts it again', async () => {
      const engine = await target.engine();
      const worker = await startWorker(engine, [keyed, note], { pollIntervalMs: 50 });
      try {
        const done = await engine.client.startMany(keyed, [1, 2], { concurrency: { key: 't', limit: 1 } });
        await Promise.all(done.map((h) => h.result({ timeoutMs: 20_000 })));
        // Live work holds its key: a run of a workflow no worker serves stays pending under key 'held'.
        const idle = defineWorkflow({
          name: 'unserved',
          input: z.null(),
          output: z.null(),
          run: () => Promise.resolve(null),
        });
        const pending = await engine.client.start(idle, null, { concurrency: { key: 'held', limit: 1 } });
        expect(await flowKeys(engine)).toEqual([
          'rate/note/k',
          'run/keyed/t',
          'run/unserved/held',
          'step/note/k',
        ]);

        await advanceClock(engine, 25 * HOUR_MS); // past the rate key's longest period
        await engine.pruneRuns({ olderThanMs: '1h' });
        expect(await flowKeys(engine)).toEqual(['run/unserved/held']);

        const again = await engine.client.start(keyed, 3, { concurrency: { key: 't', limit: 1 } });
        await expect(again.result({ timeoutMs: 20_000 })).resolves.toBe(3);
        expect(await flowKeys(engine)).toEqual([
          'rate/note/k',
          'run/keyed/t',
          'run/unserved/held',
          'step/note/k',
        ]);
        await pending.cancel('test over');
      } finally {
        await worker.stop();
      }
    });

    it("counts a key's running runs off its live runs only, however many have finished", async () => {
      const engine = await target.engine();
      const worker = await startWorker(engine, [keyed, note], { concurrency: 10, pollIntervalMs: 50 });
      const finished = await engine.client.startMany(
        keyed,
        Array.from({ length: 20 }, (_, k) => k),
        { concurrency: { key: 't', limit: 20 } },
      );
      await Promise.all(finished.map((h) => h.result({ timeoutMs: 30_000 })));
      await worker.stop();
      // The claim's count (flow-control.ts, runningRunsOfKey), with the index it is meant to use, as a plain index
      // scan: on 20 rows the planner may pick a bitmap scan instead (seen in CI), whose top node names no index.
      const scan = await engine.database.transaction(async (tx) => {
        await tx.rows(sql`SET LOCAL enable_seqscan = off`);
        await tx.rows(sql`SET LOCAL enable_bitmapscan = off`);
        const [row] = await tx.rows<{ 'QUERY PLAN': unknown }>(sql`
          EXPLAIN (ANALYZE, FORMAT JSON)
          SELECT count(*) FROM ${engine.names.runs} k
           WHERE k.name = 'keyed' AND k.live_concurrency_key = 't' AND k.status = 'running' AND k.kind = 'workflow'`);
        const plan = row!['QUERY PLAN'];
        return (typeof plan === 'string' ? JSON.parse(plan) : plan) as [
          { Plan: { Plans: Record<string, unknown>[] } },
        ];
      });
      // The runs it read off the index and then dropped: none, of the 20 finished ones.
      expect(scan[0].Plan.Plans[0]).toMatchObject({
        'Index Name': 'runs_live_concurrency_key_idx',
        'Actual Rows': 0,
        'Rows Removed by Filter': 0,
      });
    });

    it('refuses bad limits naming the option', async () => {
      const engine = await target.engine();
      const noop = pureActivity('noop', z.null(), z.null(), () => null);
      const flow = defineWorkflow({
        name: 'flow',
        input: z.null(),
        output: z.null(),
        run: () => Promise.resolve(null),
      });
      const cases: [Promise<unknown>, RegExp][] = [
        [
          engine.client.enqueue(noop, null, { concurrency: { key: 'k', limit: 0 } }),
          /concurrency\.limit.*≥ 1/,
        ],
        [engine.client.enqueue(noop, null, { concurrency: { key: '', limit: 1 } }), /concurrency\.key/],
        [engine.client.start(flow, null, { concurrency: { limit: 2 } as never }), /concurrency\.key/],
        [
          engine.client.enqueue(noop, null, { rateLimit: { limit: 1, periodMs: 'soon' } }),
          /rateLimit\.periodMs/,
        ],
        [
          engine.client.enqueue(noop, null, { rateLimit: { limit: 1.5, periodMs: '1s' } }),
          /rateLimit\.limit/,
        ],
      ];
      for (const [call, message] of cases) {
        const error = await call.catch((e: unknown) => e);
        expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
        expect((error as Error).message).toMatch(message);
      }
      expect(() =>
        defineActivity({
          name: 'bad',
          input: z.null(),
          output: z.null(),
          rateLimit: { limit: 1, periodMs: '2d' },
          run: () => Promise.resolve(null),
        }),
      ).toThrow(/rateLimit\.periodMs.*1 day/);
      expect(await engine.client.list()).toEqual([]);
    });
  });
}
