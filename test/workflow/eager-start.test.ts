/**
 * Eager start (Temporal's eager workflow start, issue 12: no separate claim where none is needed): a start on an
 * engine whose worker runs the workflow's turns, with a turn slot free, grants that worker the run's first turn
 * in the statement that creates the run — an ordinary fenced grant (fresh token, nonce, DB-clock lease, attempts
 * row) — and the turn starts at once, with no NOTIFY and no claim. Anything else starts as before.
 */
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, turnLog, until } from './workflow-rows.js';

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number() }),
  output: z.number(),
  run: ({ n }) => Promise.resolve(2 * n),
});
const twice = defineWorkflow({
  name: 'twice',
  input: z.object({ n: z.number() }),
  output: z.number(),
  run: async ({ n }, ctx) => ctx.run(double, { n }),
});
const other = defineWorkflow({
  name: 'other',
  input: z.object({}),
  output: z.null(),
  run: () => Promise.resolve(null),
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`eager start on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('grants the first turn to the local worker in the start statement; a repeated key grants nothing', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ workflows: [twice], activities: [double], pollIntervalMs: 60_000 });
      const turns = turnLog(worker);
      await worker.start();
      const handle = await engine.client.start(twice, { n: 21 }, { key: 'k' });
      // The poll interval is a minute and no NOTIFY was sent for this turn: only the eager grant runs it.
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toBe(42);
      const again = await engine.client.start(twice, { n: 21 }, { key: 'k' });
      expect(again.runId).toBe(handle.runId);
      expect(again.created).toBe(false);
      await until([worker], () => turns.some((t) => t.outcome === 'completed'), 'the last turn');

      const first = turns.find((t) => t.runId === handle.runId);
      expect(first?.grant).toBe('eager');
      const [run] = await engine.database.rows<{ created_ms: number }>(sql`
        SELECT (extract(epoch FROM created_at) * 1000)::float8 AS created_ms
          FROM ${engine.names.runs} WHERE id = ${handle.runId}::uuid`);
      const attempts = await attemptsOf(engine, handle.runId);
      const turnAttempts = attempts.filter((a) => a.kind === 'turn');
      // Granted with the run: attempt and epoch 1, claimed at the run's creation, by this worker; then ended.
      expect(turnAttempts[0]).toMatchObject({
        attempt: 1,
        epoch: 1,
        worker_id: worker.workerId,
        outcome: 'completed',
      });
      expect(turnAttempts[0]?.claimed_at_ms).toBe(run?.created_ms);
      // Tokens come from the global sequence: the activity's grant, after the turn's, has a higher one.
      const step = attempts.find((a) => a.kind === 'activity');
      expect(BigInt(step?.token ?? 0)).toBeGreaterThan(BigInt(turnAttempts[0]?.token ?? 0));
      expect(turns.filter((t) => t.runId === handle.runId).length).toBe(turnAttempts.length);
      await worker.stop();
    });

    it('leaves the first turn to a claim when no worker of the engine runs the workflow', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ workflows: [other], pollIntervalMs: 50 });
      const runner = engine.worker({ workflows: [twice], activities: [double], pollIntervalMs: 50 });
      const turns = turnLog(runner);
      await worker.start();
      // Started before the worker that runs it: nothing to grant it to.
      const handle = await engine.client.start(twice, { n: 1 });
      await runner.start();
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toBe(2);
      expect(turns.find((t) => t.runId === handle.runId)?.grant).toBe('claimed');
      await Promise.all([worker.stop(), runner.stop()]);
    });
  });
}
