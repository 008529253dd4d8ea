import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number().int() }),
  output: z.object({ n: z.number().int() }),
  run(input) {
    return Promise.resolve({ n: input.n * 2 });
  },
});

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

    it('returns the existing run when the same idempotency key is enqueued again', async () => {
      const engine = await target.engine();
      const first = await engine.client.enqueue(double, { n: 1 }, { key: 'order-7' });
      const second = await engine.client.enqueue(double, { n: 1 }, { key: 'order-7' });
      expect(second.runId).toBe(first.runId);
      expect(await engine.client.list()).toHaveLength(1);
    });
  });
}
