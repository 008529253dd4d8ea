/**
 * Progress (issue 13): `ctx.setProgress(value)` in workflow code is recorded with the turn's commit and read by
 * `handle.describe().run.progress`; an activity's heartbeat details are read by `describe().steps[k]`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineSignal, defineWorkflow } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { deferred, stepsReach } from './workflow-rows.js';

const proceed = defineSignal({ name: 'proceed', payload: z.null() });

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`progress on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('records the last value the code set, turn by turn, on kept instances and full replays', async () => {
      const engine = await target.engine();
      const charge = defineActivity({
        name: 'charge',
        input: z.number(),
        output: z.number(),
        run: (n) => Promise.resolve(n * 2),
      });
      const staged = defineWorkflow({
        name: 'staged',
        input: z.object({}),
        output: z.number(),
        async run(_input, ctx) {
          ctx.setProgress({ stage: 'charging' });
          const charged = await ctx.run(charge, 21);
          ctx.setProgress({ stage: 'waiting', charged });
          await ctx.waitForSignal(proceed);
          ctx.setProgress({ stage: 'done', charged });
          return charged;
        },
      });
      for (const workflowCacheSize of [undefined, 0]) {
        const worker = engine.worker({
          workflows: [staged],
          activities: [charge],
          pollIntervalMs: 50,
          ...(workflowCacheSize === undefined ? {} : { workflowCacheSize }),
        });
        await worker.start();
        const handle = await engine.client.start(staged, {});
        await stepsReach(
          [worker],
          engine,
          handle.runId,
          (steps) => steps.some((s) => s.kind === 'signal'),
          'the wait',
        );
        expect((await handle.describe()).run.progress).toEqual({ stage: 'waiting', charged: 42 });
        await handle.signal(proceed, null);
        await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe(42);
        expect((await handle.describe()).run.progress).toEqual({ stage: 'done', charged: 42 });
        await worker.stop();
      }
    });

    it('fails the run naming the path when the progress is not JSON', async () => {
      const engine = await target.engine();
      const dated = defineWorkflow({
        name: 'dated',
        input: z.object({}),
        output: z.null(),
        run(_input, ctx) {
          ctx.setProgress({ at: new Date(0) });
          return Promise.resolve(null);
        },
      });
      const worker = engine.worker({ workflows: [dated], pollIntervalMs: 50 });
      await worker.start();
      const handle = await engine.client.start(dated, {});
      const error = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'RUN_FAILED' });
      expect((error as { failure: { message: string } }).failure.message).toMatch(
        /progress of workflow dated.*at/s,
      );
      expect((await handle.describe()).run.progress).toBeNull();
    });

    it("shows a running activity's heartbeat details", async () => {
      const engine = await target.engine();
      const gate = deferred();
      const beat = deferred();
      const crawl = defineActivity({
        name: 'crawl',
        input: z.object({}),
        output: z.null(),
        async run(_input, ctx) {
          await ctx.heartbeat({ page: 3, of: 10 });
          beat.resolve();
          await gate.promise;
          return null;
        },
      });
      const worker = engine.worker({ activities: [crawl], pollIntervalMs: 50 });
      await worker.start();
      const handle = await engine.client.enqueue(crawl, {});
      await beat.promise;
      const [step] = (await handle.describe()).steps;
      expect(step?.heartbeatDetails).toEqual({ page: 3, of: 10 });
      gate.resolve();
      await handle.result({ timeoutMs: 15_000 });
    });
  });
}
