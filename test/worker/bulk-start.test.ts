/**
 * Bulk starts: `client.enqueueMany` and `client.startMany` insert many runs in one statement per 1,000 with one
 * NOTIFY, and behave as the single calls one by one: every input checked before anything is written (a bad one
 * named by its index), keys idempotent within the batch and against existing runs, handles in input order, a
 * refused key leaving nothing of its statement written, a retry after a lost reply creating nothing twice.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ValidationError, defineActivity, defineWorkflow } from '@palisade/sdk';
import { BULK_START_LIMITS, type Engine, type Worker } from '@palisade/engine';
import { setFaultHook } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { palisadeRejectionOf } from '../support/rejections.js';

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number().int() }),
  output: z.object({ doubled: z.number().int() }),
  run: ({ n }) => Promise.resolve({ doubled: n * 2 }),
});

const settleOrder = defineWorkflow({
  name: 'settle-order',
  input: z.object({ n: z.number().int() }),
  output: z.object({ settled: z.number().int() }),
  run: async ({ n }, ctx) => ({ settled: (await ctx.run(double, { n })).doubled }),
});

interface StoredRun {
  id: string;
  kind: string;
  status: string;
  input: unknown;
  output: unknown;
  idempotency_key: string | null;
}

/** Every run of the engine's schema as stored, with its step and event counts. */
async function storedRuns(engine: Engine): Promise<Map<string, StoredRun>> {
  const rows = await engine.database.rows<StoredRun>(sql`
    SELECT id::text, kind, status, input, output, idempotency_key FROM ${engine.names.runs}`);
  return new Map(rows.map((r) => [r.id, r]));
}

async function countOf(engine: Engine, table: 'runs' | 'steps' | 'runEvents' | 'attempts'): Promise<number> {
  const rows = await engine.database.rows<{ c: number }>(
    sql`SELECT count(*)::int AS c FROM ${engine.names[table]}`,
  );
  return Number(rows[0]?.c);
}

/** Resolves once `worker` has emitted `count` events `name` passing `predicate` (set up before causing them). */
function eventCount(
  worker: Worker,
  name: 'attempt:completed' | 'turn:committed',
  count: number,
  predicate: (arg: { outcome?: string }) => boolean = () => true,
  timeoutMs = 120_000,
): Promise<void> {
  const emitter = worker.events as unknown as {
    on(name: string, fn: (arg: { outcome?: string }) => void): unknown;
    off(name: string, fn: (arg: { outcome?: string }) => void): unknown;
  };
  return new Promise<void>((resolve, reject) => {
    let seen = 0;
    const timer = setTimeout(() => {
      emitter.off(name, handler);
      reject(new Error(`only ${seen} of ${count} ${name} events within ${timeoutMs} ms`));
    }, timeoutMs);
    function handler(arg: { outcome?: string }): void {
      if (!predicate(arg) || ++seen < count) return;
      clearTimeout(timer);
      emitter.off(name, handler);
      resolve();
    }
    emitter.on(name, handler);
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`bulk starts on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('runs every activity of a batch larger than one statement exactly once, woken by its NOTIFY', async () => {
      // 2,500 on a server: three statements (1,000 + 1,000 + 500). PGlite runs one query at a time; 1,200 still
      // spans two statements.
      const count = driver === 'postgres' ? 2_500 : 1_200;
      expect(BULK_START_LIMITS.runsPerStatement).toBe(1_000);
      const handled = new Map<number, number>();
      const noop = defineActivity({
        name: 'noop',
        input: z.object({ i: z.number().int() }),
        output: z.null(),
        run: ({ i }) => {
          handled.set(i, (handled.get(i) ?? 0) + 1);
          return Promise.resolve(null);
        },
      });
      const engine = await target.engine();
      // With a 10-minute poll, only the NOTIFY of the inserts can wake this idle worker within the test.
      const worker = engine.worker({ activities: [noop], concurrency: 10, pollIntervalMs: 600_000 });
      await worker.start();
      const done = eventCount(worker, 'attempt:completed', count);

      const inputs = Array.from({ length: count }, (_, i) => ({ i }));
      const handles = await engine.client.enqueueMany(noop, inputs);
      await done;

      expect(handles).toHaveLength(count);
      expect(handles.every((h) => h.created)).toBe(true);
      expect(new Set(handles.map((h) => h.runId)).size).toBe(count);
      expect(handled.size).toBe(count);
      expect([...handled.values()].every((calls) => calls === 1)).toBe(true);
      const runs = await storedRuns(engine);
      expect(runs.size).toBe(count);
      // Handles come back in input order: handle k names the run stored with input k.
      handles.forEach((h, k) =>
        expect(runs.get(h.runId)).toMatchObject({ kind: 'activity', input: { i: k } }),
      );
      // The run's completion commits with the attempt's, after the event: wait on the last handle, then count.
      await handles[count - 1]?.result({ timeoutMs: 30_000 });
      const completed = await engine.database.rows<{ c: number }>(sql`
        SELECT count(*)::int AS c FROM ${engine.names.attempts} WHERE outcome = 'completed'`);
      expect(Number(completed[0]?.c)).toBe(count);
      expect(await countOf(engine, 'steps')).toBe(count);
    });

    it('starts a batch of workflows that all complete, with results in input order', async () => {
      const engine = await target.engine();
      const worker = engine.worker({
        workflows: [settleOrder],
        activities: [double],
        pollIntervalMs: 600_000,
      });
      await worker.start();
      const count = 40;
      const finished = eventCount(worker, 'turn:committed', count, (e) => e.outcome === 'completed');
      const handles = await engine.client.startMany(
        settleOrder,
        Array.from({ length: count }, (_, n) => ({ n })),
      );
      await finished;
      expect(await Promise.all(handles.map((h) => h.result({ timeoutMs: 30_000 })))).toEqual(
        Array.from({ length: count }, (_, n) => ({ settled: 2 * n })),
      );
      const runs = await storedRuns(engine);
      expect(
        [...runs.values()].filter((r) => r.kind === 'workflow' && r.status === 'completed'),
      ).toHaveLength(count);
      // One run:started per run in their histories (read off the run rows: none is stored).
      const started = await engine.database.rows<{ c: number }>(sql`
        SELECT count(*)::int AS c FROM ${engine.names.runEvents} WHERE type = 'run:started'`);
      expect(Number(started[0]?.c)).toBe(count);
    });

    it('deduplicates keys within a batch and against existing runs, as the single calls do one by one', async () => {
      const engine = await target.engine();
      const existing = await engine.client.enqueue(double, { n: 1 }, { key: 'a' });
      const handles = await engine.client.enqueueMany(double, [{ n: 1 }, { n: 2 }, { n: 2 }, { n: 3 }], {
        keys: ['a', 'b', 'b', undefined],
      });
      expect(handles.map((h) => h.created)).toEqual([false, true, false, true]);
      expect(handles[0]?.runId).toBe(existing.runId);
      expect(handles[2]?.runId).toBe(handles[1]?.runId);
      expect(new Set([existing.runId, ...handles.map((h) => h.runId)]).size).toBe(3);
      expect(await countOf(engine, 'runs')).toBe(3);
      expect(await countOf(engine, 'steps')).toBe(3);

      // The same call again: the keyed inputs name their runs; the unkeyed one is new work.
      const again = await engine.client.enqueueMany(double, [{ n: 1 }, { n: 2 }, { n: 2 }, { n: 3 }], {
        keys: ['a', 'b', 'b', undefined],
      });
      expect(again.map((h) => h.created)).toEqual([false, false, false, true]);
      expect(again.slice(0, 3).map((h) => h.runId)).toEqual(handles.slice(0, 3).map((h) => h.runId));
      expect(await countOf(engine, 'runs')).toBe(4);

      // Keys are scoped to the workflow: 'a' starts a workflow run of its own, once.
      const flows = await engine.client.startMany(settleOrder, [{ n: 1 }, { n: 1 }], { keys: ['a', 'a'] });
      expect(flows.map((h) => h.created)).toEqual([true, false]);
      expect(flows[1]?.runId).toBe(flows[0]?.runId);
      expect(flows[0]?.runId).not.toBe(existing.runId);

      const worker = engine.worker({ workflows: [settleOrder], activities: [double] });
      await worker.start();
      expect(await Promise.all(handles.map((h) => h.result({ timeoutMs: 15_000 })))).toEqual([
        { doubled: 2 },
        { doubled: 4 },
        { doubled: 4 },
        { doubled: 6 },
      ]);
      await expect(flows[1]?.result({ timeoutMs: 15_000 })).resolves.toEqual({ settled: 2 });
    });

    it('refuses a key that names a run with another input with RUN_KEY_CONFLICT, writing nothing of the batch', async () => {
      const engine = await target.engine();
      const existing = await engine.client.enqueue(double, { n: 1 }, { key: 'a' });

      const clash = await palisadeRejectionOf(
        engine.client.enqueueMany(double, [{ n: 5 }, { n: 6 }], { keys: ['c', 'a'] }),
      );
      expect(clash.code).toBe('RUN_KEY_CONFLICT');
      expect(clash.runId).toBe(existing.runId);
      expect(clash.message).toBe(
        `[RUN_KEY_CONFLICT] enqueueMany of activity double: key "a" of inputs[1] already started run ` +
          `${existing.runId} with a different input. Nothing of inputs[0..1] was written. Use another key for ` +
          "new work, or pass onConflict: 'use-existing' to get a handle to that run.",
      );

      const within = await palisadeRejectionOf(
        engine.client.startMany(settleOrder, [{ n: 7 }, { n: 8 }, { n: 9 }], { keys: ['d', undefined, 'd'] }),
      );
      expect(within.code).toBe('RUN_KEY_CONFLICT');
      expect(within.runId).toBeUndefined();
      expect(within.message).toMatch(
        /^\[RUN_KEY_CONFLICT\] startMany of workflow settle-order: inputs\[2\] has the key "d" of inputs\[0\] with a different input\. Nothing of inputs\[0\.\.2\] was written\./,
      );
      // Neither batch left a run, a step or an event behind: only the first enqueue's.
      expect(await countOf(engine, 'runs')).toBe(1);
      expect(await countOf(engine, 'steps')).toBe(1);
      expect(await countOf(engine, 'runEvents')).toBe(1);

      // With onConflict: 'use-existing' both name the run the key already names.
      const attached = await engine.client.enqueueMany(double, [{ n: 9 }, { n: 10 }, { n: 11 }], {
        keys: ['e', 'e', 'a'],
        onConflict: 'use-existing',
      });
      expect(attached.map((h) => h.created)).toEqual([true, false, false]);
      expect(attached[1]?.runId).toBe(attached[0]?.runId);
      expect(attached[2]?.runId).toBe(existing.runId);
      const runs = await storedRuns(engine);
      expect(runs.get(attached[0]?.runId ?? '')?.input).toEqual({ n: 9 });
      expect(runs.size).toBe(2);
    });

    it('writes nothing of a call over several statements whose last statement meets a key conflict', async () => {
      // 2,500 inputs: three statements (1,000 + 1,000 + 500); the key of inputs[2,400] names a run with another
      // input. A blind retry of a call that left the first 2,000 runs written would start them twice.
      const engine = await target.engine();
      const existing = await engine.client.enqueue(double, { n: -1 }, { key: 'taken' });
      const count = 2_500;
      const keys = Array.from({ length: count }, (_, k) => (k === 2_400 ? 'taken' : undefined));
      const inputs = Array.from({ length: count }, (_, n) => ({ n }));

      const clash = await palisadeRejectionOf(engine.client.enqueueMany(double, inputs, { keys }));
      expect(clash.code).toBe('RUN_KEY_CONFLICT');
      expect(clash.runId).toBe(existing.runId);
      expect(clash.message).toContain('key "taken" of inputs[2400] already started run');
      expect(clash.message).toContain(`Nothing of inputs[0..${count - 1}] was written.`);
      expect(await countOf(engine, 'runs')).toBe(1);
      expect(await countOf(engine, 'steps')).toBe(1);
      expect(await countOf(engine, 'runEvents')).toBe(1);

      const workflowClash = await palisadeRejectionOf(
        engine.client.startMany(settleOrder, inputs, {
          keys: inputs.map((_, i) => (i === 2_000 || i === 2_499 ? 'w' : undefined)),
        }),
      );
      expect(workflowClash.code).toBe('RUN_KEY_CONFLICT');
      expect(workflowClash.message).toContain('inputs[2499] has the key "w" of inputs[2000]');
      expect(await countOf(engine, 'runs')).toBe(1);

      // A key of the first statement repeated with another input in the last names the input, not a run that the
      // refusal rolled back.
      const acrossStatements = await palisadeRejectionOf(
        engine.client.startMany(settleOrder, inputs, {
          keys: inputs.map((_, i) => (i === 5 || i === 2_450 ? 'v' : undefined)),
        }),
      );
      expect(acrossStatements.message).toContain(
        'inputs[2450] has the key "v" of inputs[5] with a different input',
      );
      expect(acrossStatements.message).toContain('Nothing of inputs[0..2499] was written.');
      expect(await countOf(engine, 'runs')).toBe(1);
      expect(await countOf(engine, 'runEvents')).toBe(1);

      // The same call without the conflict writes every run, once.
      const handles = await engine.client.enqueueMany(double, inputs);
      expect(new Set(handles.map((h) => h.runId)).size).toBe(count);
      expect(await countOf(engine, 'runs')).toBe(count + 1);
    });

    it('refuses a bad input by its index and field before writing anything, in any statement of the call', async () => {
      const engine = await target.engine();
      // Index 1,500 is in the second statement: the first is not written either.
      const inputs: { n: unknown }[] = Array.from({ length: 1_600 }, (_, n) => ({ n }));
      inputs[1_500] = { n: 'x' };
      const bad = await palisadeRejectionOf(engine.client.enqueueMany(double, inputs as { n: number }[]));
      expect(bad).toBeInstanceOf(ValidationError);
      expect(bad.code).toBe('VALIDATION_FAILED');
      expect(bad.message).toMatch(/^\[VALIDATION_FAILED\] inputs\[1500\] of activity double is invalid: n: /);
      expect((bad as ValidationError).issues[0]?.path).toBe('n');

      const notJson = await palisadeRejectionOf(
        engine.client.enqueueMany(
          defineActivity({
            name: 'raw',
            input: z.unknown(),
            output: z.null(),
            run: () => Promise.resolve(null),
          }),
          [1, { when: new Date(0) }],
        ),
      );
      expect(notJson.code).toBe('VALIDATION_FAILED');
      expect(notJson.message).toMatch(
        /^\[VALIDATION_FAILED\] inputs\[1\] of activity raw is invalid: when: /,
      );

      const keys = await palisadeRejectionOf(
        engine.client.enqueueMany(double, [{ n: 1 }, { n: 2 }], { keys: ['a'] }),
      );
      expect(keys.code).toBe('INVALID_OPTIONS');
      expect(keys.message).toContain('keys: must hold one key (or undefined) per input: 2 inputs, 1 keys');

      const badKey = await palisadeRejectionOf(
        engine.client.startMany(settleOrder, [{ n: 1 }, { n: 2 }], { keys: ['ok', 'k\u0000'] }),
      );
      expect(badKey.code).toBe('INVALID_OPTIONS');
      expect(badKey.message).toContain('keys.1: must be storable text');

      const single = await palisadeRejectionOf(
        engine.client.enqueueMany(double, [{ n: 1 }], { key: 'one' } as never),
      );
      expect(single.code).toBe('INVALID_OPTIONS');

      const notArray = await palisadeRejectionOf(engine.client.enqueueMany(double, { n: 1 } as never));
      expect(notArray.message).toContain('inputs: must be an array');

      expect(await countOf(engine, 'runs')).toBe(0);
      expect(await countOf(engine, 'runEvents')).toBe(0);
      expect(await engine.client.enqueueMany(double, [])).toEqual([]);
    });

    it('creates each run of a batch once when the reply of its committed statement was lost', async () => {
      const engine = await target.engine();
      let calls = 0;
      setFaultHook('client:after-insert-run', () => {
        calls++;
        return calls === 1
          ? Promise.reject(Object.assign(new Error('write CONNECTION_CLOSED'), { code: 'CONNECTION_CLOSED' }))
          : Promise.resolve();
      });
      try {
        const handles = await engine.client.enqueueMany(double, [{ n: 1 }, { n: 2 }, { n: 2 }], {
          keys: ['x', 'y', 'y'],
        });
        expect(calls).toBe(2); // committed with its reply lost, then retried
        expect(handles.map((h) => h.created)).toEqual([true, true, false]);
        expect(handles[2]?.runId).toBe(handles[1]?.runId);
        expect(await countOf(engine, 'runs')).toBe(2);
        expect(await countOf(engine, 'runEvents')).toBe(2);
      } finally {
        setFaultHook('client:after-insert-run', undefined);
      }
    });
  });
}
