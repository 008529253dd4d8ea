/**
 * Idempotency keys that cannot surprise: a key is scoped to the workflow or activity it starts; the same key with
 * another input is RUN_KEY_CONFLICT naming the existing run unless the caller attaches; the handle says whether
 * this call created the run; a start retried after a lost reply is still the one creator.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import { setFaultHook } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { palisadeRejectionOf } from '../support/rejections.js';

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number() }),
  output: z.object({ doubled: z.number() }),
  run: ({ n }) => Promise.resolve({ doubled: n * 2 }),
});

const settle = defineWorkflow({
  name: 'settle',
  input: z.object({ n: z.number() }),
  output: z.object({ settled: z.number() }),
  run: async ({ n }, ctx) => ({ settled: (await ctx.run(double, { n })).doubled }),
});

/** A connection error as postgres.js reports one: what a reply lost after the COMMIT looks like to the client. */
function lostReply(): Error {
  return Object.assign(new Error('write CONNECTION_CLOSED 127.0.0.1:5432'), { code: 'CONNECTION_CLOSED' });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`idempotency keys on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('refuses a workflow key reused with another input with RUN_KEY_CONFLICT naming the existing run', async () => {
      const engine = await target.engine();
      const first = await engine.client.start(settle, { n: 1 }, { key: 'batch-1' });
      expect(first.created).toBe(true);
      const error = await palisadeRejectionOf(engine.client.start(settle, { n: 2 }, { key: 'batch-1' }));
      expect(error.code).toBe('RUN_KEY_CONFLICT');
      expect(error.runId).toBe(first.runId);
      expect(error.message).toBe(
        `[RUN_KEY_CONFLICT] start of workflow settle: key "batch-1" already started run ${first.runId} with a ` +
          "different input. Use another key for new work, or pass onConflict: 'use-existing' to get a handle to that run.",
      );
      expect(await engine.client.list({ name: 'settle' })).toHaveLength(1);
    });

    it('attaches to the existing run with onConflict use-existing, saying it did not create it', async () => {
      const engine = await target.engine();
      const first = await engine.client.enqueue(double, { n: 1 }, { key: 'job-1' });
      const attached = await engine.client.enqueue(
        double,
        { n: 5 },
        { key: 'job-1', onConflict: 'use-existing' },
      );
      expect(attached.runId).toBe(first.runId);
      expect([first.created, attached.created]).toEqual([true, false]);
      const worker = engine.worker({ activities: [double] });
      await worker.start();
      await expect(attached.result({ timeoutMs: 15_000 })).resolves.toEqual({ doubled: 2 });
    });

    it('scopes a key to its workflow or activity: an enqueue never returns a workflow run that used the key', async () => {
      const engine = await target.engine();
      const wf = await engine.client.start(settle, { n: 3 }, { key: 'shared-key' });
      const job = await engine.client.enqueue(double, { n: 3 }, { key: 'shared-key' });
      expect(job.runId).not.toBe(wf.runId);
      expect([wf.created, job.created]).toEqual([true, true]);
      const worker = engine.worker({ workflows: [settle], activities: [double] });
      await worker.start();
      await expect(job.result({ timeoutMs: 15_000 })).resolves.toEqual({ doubled: 6 });
      await expect(wf.result({ timeoutMs: 15_000 })).resolves.toEqual({ settled: 6 });
    });

    it('creates one run for a start retried after its reply was lost, and says this call created it', async () => {
      const engine = await target.engine();
      let lost = 0;
      setFaultHook('client:after-insert-run', () => {
        lost++;
        return lost === 1 ? Promise.reject(lostReply()) : Promise.resolve();
      });
      try {
        const handle = await engine.client.start(settle, { n: 4 }, { key: 'retried' });
        expect(lost).toBe(2); // the insert ran twice: once committed with its reply lost, once as the retry
        expect(handle.created).toBe(true);
        const runs = await engine.client.list({ name: 'settle' });
        expect(runs.map((r) => r.id)).toEqual([handle.runId]);
        const again = await engine.client.start(settle, { n: 4 }, { key: 'retried' });
        expect([again.runId, again.created]).toEqual([handle.runId, false]);
      } finally {
        setFaultHook('client:after-insert-run', undefined);
      }
    });
  });
}
