/**
 * Progress (issue 13): `ctx.setProgress(value)` in workflow code is recorded with the turn's commit and read by
 * `handle.describe().run.progress`; an activity's heartbeat details are read by `describe().steps[k]`.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSignal } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { startWorker } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';
import { pureActivity } from '../fixtures/pure-activity.js';
import { deferred, stepOfKindReached } from './workflow-rows.js';

const proceed = defineSignal({ name: 'proceed', payload: z.null() });

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`progress on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('records the last value the code set, turn by turn, on kept instances and full replays', async () => {
      const engine = await target.engine();
      const charge = pureActivity('charge', z.number(), z.number(), (n) => n * 2);
      const staged = noInputWorkflow('staged', z.number(), async (ctx) => {
        ctx.setProgress({ stage: 'charging' });
        const charged = await ctx.run(charge, 21);
        ctx.setProgress({ stage: 'waiting', charged });
        await ctx.waitForSignal(proceed);
        ctx.setProgress({ stage: 'done', charged });
        return charged;
      });
      for (const workflowCacheSize of [undefined, 0]) {
        const worker = await startWorker(engine, [staged, charge], {
          pollIntervalMs: 50,
          ...(workflowCacheSize === undefined ? {} : { workflowCacheSize }),
        });
        const handle = await engine.client.start(staged, {});
        await stepOfKindReached([worker], engine, handle.runId, 'signal', 'the wait');
        expect((await handle.describe()).run.progress).toEqual({ stage: 'waiting', charged: 42 });
        await handle.signal(proceed, null);
        await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe(42);
        expect((await handle.describe()).run.progress).toEqual({ stage: 'done', charged: 42 });
        await worker.stop();
      }
    });

    it('fails the run naming the path when the progress is not JSON', async () => {
      const engine = await target.engine();
      const dated = noInputWorkflow('dated', z.null(), (ctx) => {
        ctx.setProgress({ at: new Date(0) });
        return Promise.resolve(null);
      });
      await startWorker(engine, [dated], { pollIntervalMs: 50 });
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
      const crawl = noInputActivity('crawl', z.null(), async (ctx) => {
        await ctx.heartbeat({ page: 3, of: 10 });
        beat.resolve();
        await gate.promise;
        return null;
      });
      await startWorker(engine, [crawl], { pollIntervalMs: 50 });
      const handle = await engine.client.enqueue(crawl, {});
      await beat.promise;
      const [step] = (await handle.describe()).steps;
      expect(step?.heartbeatDetails).toEqual({ page: 3, of: 10 });
      gate.resolve();
      await handle.result({ timeoutMs: 15_000 });
    });
  });
}
