import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, PalisadeError, RunNotFoundError, defineActivity } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, gate, settle, stepOf, workerEvent } from './helpers.js';
import { startWorker } from '../support/worker.js';
import { noInputActivity } from '../fixtures/no-input.js';
import { echoActivity, pureActivity } from '../fixtures/pure-activity.js';

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`client on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('gives up waiting with RESULT_TIMEOUT while the run goes on, and a later result() gets the output', async () => {
      const finish = gate();
      const slow = noInputActivity('slow', z.object({ done: z.literal(true) }), async () => {
        await finish.promise;
        return { done: true as const };
      });
      const engine = await target.engine();
      const worker = await startWorker(engine, [slow], { pollIntervalMs: 20 });
      const started = workerEvent(worker, 'attempt:started');
      const handle = await engine.client.enqueue(slow, {});
      await started;

      const waitStart = performance.now();
      const outcome = await settle(handle.result({ timeoutMs: 300, pollIntervalMs: 50 }));
      const waitedMs = performance.now() - waitStart;
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(PalisadeError);
      expect(error).toMatchObject({ code: 'RESULT_TIMEOUT', runId: handle.runId });
      expect((error as Error).message).toMatch(/^\[RESULT_TIMEOUT\] run .* is still running after 300 ms/);
      expect(waitedMs).toBeGreaterThanOrEqual(290);
      expect(waitedMs).toBeLessThan(5_000);
      // The timeout was the caller's: the run and its attempt carry on untouched.
      expect((await handle.describe()).run.status).toBe('running');
      expect(await stepOf(engine, handle.runId)).toMatchObject({ status: 'running', attempt: 1 });
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual([null]);

      finish.open();
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ done: true });
    });

    it('reports RunNotFoundError from describe, result and cancel of an unknown run id', async () => {
      const engine = await target.engine();
      for (const id of [randomUUID(), 'not-a-run-id']) {
        const handle = engine.client.getHandle(id);
        expect(handle.runId).toBe(id);
        for (const call of [
          () => handle.describe(),
          () => handle.result({ timeoutMs: 1_000 }),
          () => handle.cancel(),
        ]) {
          const outcome = await settle(call());
          const error = (outcome as { error: unknown }).error;
          expect(error).toBeInstanceOf(RunNotFoundError);
          expect(error).toMatchObject({ code: 'RUN_NOT_FOUND' });
          expect((error as Error).message).toContain(`run ${id} does not exist`);
        }
      }
    });

    it('lists runs newest first, filtered by status and by name', async () => {
      const alpha = echoActivity('alpha', z.object({ n: z.number() }));
      const beta = defineActivity({
        name: 'beta',
        input: z.object({ n: z.number() }),
        output: z.object({}),
        run() {
          throw ApplicationFailure.nonRetryable('beta always fails');
        },
      });
      const gamma = pureActivity('gamma', z.object({ n: z.number() }), z.object({}), () => ({}));
      const engine = await target.engine();
      const a1 = await engine.client.enqueue(alpha, { n: 1 });
      const a2 = await engine.client.enqueue(alpha, { n: 2 });
      const b1 = await engine.client.enqueue(beta, { n: 3 });
      const a3 = await engine.client.enqueue(alpha, { n: 4 });
      await a3.cancel();
      const g1 = await engine.client.enqueue(gamma, { n: 5 }); // no worker serves gamma: stays pending
      await startWorker(engine, [alpha, beta], { pollIntervalMs: 20 });
      await Promise.all([a1.result(), a2.result(), settle(b1.result())]);

      const ids = async (filter: Parameters<typeof engine.client.list>[0]) =>
        (await engine.client.list(filter)).map((r) => r.id);
      expect(await ids({})).toEqual([g1, a3, b1, a2, a1].map((h) => h.runId));
      expect(await ids({ status: 'completed' })).toEqual([a2.runId, a1.runId]);
      expect(await ids({ status: 'failed' })).toEqual([b1.runId]);
      expect(await ids({ status: 'cancelled' })).toEqual([a3.runId]);
      expect(await ids({ status: 'pending' })).toEqual([g1.runId]);
      expect(await ids({ name: 'alpha' })).toEqual([a3.runId, a2.runId, a1.runId]);
      expect(await ids({ name: 'alpha', status: 'completed' })).toEqual([a2.runId, a1.runId]);
      expect(await ids({ name: 'beta', status: 'completed' })).toEqual([]);
      expect(await ids({ name: 'nothing-by-this-name' })).toEqual([]);
      expect(await ids({ limit: 2 })).toEqual([g1.runId, a3.runId]);

      const [failed] = await engine.client.list({ status: 'failed' });
      expect(failed).toMatchObject({
        kind: 'activity',
        name: 'beta',
        status: 'failed',
        input: { n: 3 },
        error: { message: 'beta always fails', nonRetryable: true },
      });
      const [done] = await engine.client.list({ name: 'alpha', status: 'completed', limit: 1 });
      expect(done).toMatchObject({ name: 'alpha', output: { n: 2 } });
      expect(done?.finishedAt?.toISOString()).toMatch(/^\d{4}-\d\d-\d\dT/);
    });
  });
}
