import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { holdActivity } from './held-activity.js';

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number().int() }),
  output: z.object({ n: z.number().int() }),
  run(input) {
    return Promise.resolve({ n: input.n * 2 });
  },
});

/** The job's run and step rows as stored: the run row's version (`xmin`), and what each stores of input and output. */
async function storedJob(engine: Engine, runId: string) {
  const [row] = await engine.database.rows<{
    run_version: string;
    run_status: string;
    run_input: unknown;
    run_output: unknown;
    step_input: unknown;
    step_output: unknown;
  }>(sql`
    SELECT r.xmin::text AS run_version, r.status AS run_status, r.input AS run_input, r.output AS run_output,
           s.input AS step_input, s.output AS step_output
      FROM ${engine.names.runs} r JOIN ${engine.names.steps} s ON s.run_id = r.id
     WHERE r.id = ${runId}::uuid`);
  if (!row) throw new Error(`no run ${runId}`);
  return row;
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`standalone activities on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('runs an enqueued activity once and returns its validated output', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ activities: [double] });
      await worker.start();
      const handle = await engine.client.enqueue(double, { n: 21 });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ n: 42 });
      const description = await handle.describe();
      expect(description.run.status).toBe('completed');
      expect(description.steps).toHaveLength(1);
      expect(description.steps[0]?.attempts.map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
        [1, 1, 'completed'],
      ]);
      expect(description.events.map((e) => e.type)).toEqual([
        'step:scheduled',
        'attempt:claimed',
        'step:completed',
        'run:completed',
      ]);
    });

    it("writes a job's run row once after its insert, and stores its input and output once, on the run", async () => {
      const engine = await target.engine();
      const held = holdActivity('held');
      const worker = engine.worker({ activities: [held.activity] });
      const label = 'x'.repeat(1000);
      const handle = await engine.client.enqueue(held.activity, { label });
      const inserted = await storedJob(engine, handle.runId);
      expect(inserted).toMatchObject({ run_status: 'pending', run_input: { label }, step_input: null });

      await worker.start();
      const attempt = await held.next();
      // The claim did not write the run row; the run reads as running off its step, with the step's start.
      const running = await storedJob(engine, handle.runId);
      expect(running.run_version).toBe(inserted.run_version);
      expect(running.run_status).toBe('pending');
      const { run } = await handle.describe();
      expect(run.status).toBe('running');
      expect(run.startedAt).not.toBeNull();
      expect((await engine.client.list({ status: 'running' })).map((r) => r.id)).toEqual([handle.runId]);
      expect(await engine.client.list({ status: 'pending' })).toEqual([]);

      attempt.complete('done');
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ by: 'done' });
      const ended = await storedJob(engine, handle.runId);
      expect(ended).toMatchObject({ run_status: 'completed', run_output: { by: 'done' }, step_output: null });
      const description = await handle.describe();
      expect(description.run).toMatchObject({ status: 'completed', startedAt: run.startedAt });
      expect(description.steps[0]?.output).toEqual({ by: 'done' });
      await worker.stop();
    });

    it('returns the existing run when the same idempotency key is enqueued again', async () => {
      const engine = await target.engine();
      const first = await engine.client.enqueue(double, { n: 1 }, { key: 'order-7' });
      const second = await engine.client.enqueue(double, { n: 1 }, { key: 'order-7' });
      expect(second.runId).toBe(first.runId);
      expect(await engine.client.list()).toHaveLength(1);
    });
  });
}
