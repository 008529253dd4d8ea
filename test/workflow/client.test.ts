import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { defineActivity, defineWorkflow, PalisadeError, RunFailedError } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, stepsOf } from './workflow-rows.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';
import { oneStepWorkflow } from '../fixtures/one-step-workflow.js';

const greet = defineWorkflow({
  name: 'greet',
  input: z.object({ name: z.string() }),
  output: z.string(),
  run: ({ name }) => Promise.resolve(`hello ${name}`),
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`workflow client on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('returns the existing run when a workflow is started again with the same key and input, even after it ended', async () => {
      let executions = 0;
      const once = defineActivity({
        name: 'once',
        input: z.string(),
        output: z.string(),
        run: (s) => {
          executions++;
          return Promise.resolve(s);
        },
      });
      const keyed = oneStepWorkflow('keyed', once);
      const engine = await target.engine();
      const [a, b] = await Promise.all([
        engine.client.start(keyed, 'first', { key: 'order-42' }),
        engine.client.start(keyed, 'first', { key: 'order-42' }),
      ]);
      expect(b.runId).toBe(a.runId);
      expect([a.created, b.created].sort()).toEqual([false, true]);
      await startWorker(engine, [keyed, once]);
      await expect(a.result({ timeoutMs: 15_000 })).resolves.toBe('first');
      const again = await engine.client.start(keyed, 'first', { key: 'order-42' });
      expect(again.runId).toBe(a.runId);
      expect(again.created).toBe(false);
      await expect(again.result({ timeoutMs: 5_000 })).resolves.toBe('first');
      expect(executions).toBe(1);
      expect(await engine.client.list({ name: 'keyed' })).toHaveLength(1);
      const other = await engine.client.start(keyed, 'x', { key: 'order-43' });
      expect(other.runId).not.toBe(a.runId);
      expect(other.created).toBe(true);
    });

    it('wakes result() on the NOTIFY of the commit that ends the run, not on its poll interval', async () => {
      const engine = await target.engine();
      const handle = await engine.client.start(greet, { name: 'ada' });
      // With a 10-minute poll, only the NOTIFY can wake the waiter within the test's timeout.
      const result = handle.result({ pollIntervalMs: 600_000, timeoutMs: 900_000 });
      const worker = workerFor(engine, [greet]);
      const started = performance.now();
      await worker.start();
      await expect(result).resolves.toBe('hello ada');
      expect(performance.now() - started).toBeLessThan(15_000);
    });

    it('describes a run: its steps with every attempt’s epoch, token and outcome, and its events', async () => {
      let calls = 0;
      const shaky = noInputActivity(
        'shaky',
        z.number(),
        () => {
          if (++calls === 1) throw new Error('first try fails');
          return Promise.resolve(calls);
        },
        { retry: { maximumAttempts: 3, initialIntervalMs: 10, jitter: 0 } },
      );
      const wf = oneStepWorkflow('describe-me', shaky);
      const engine = await target.engine();
      const worker = await startWorker(engine, [wf, shaky], { pollIntervalMs: 50 });
      const handle = await engine.client.start(wf, {});
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe(2);
      const d = await handle.describe();
      expect(d.run).toMatchObject({
        id: handle.runId,
        kind: 'workflow',
        name: 'describe-me',
        status: 'completed',
        output: 2,
      });
      expect(d.steps).toHaveLength(1);
      const [step] = d.steps;
      expect(step).toMatchObject({
        seq: 0,
        kind: 'activity',
        name: 'shaky',
        status: 'completed',
        attempt: 2,
        epoch: 2,
      });
      expect(step?.attempts.map((a) => [a.kind, a.attempt, a.epoch, a.outcome, a.workerId])).toEqual([
        ['activity', 1, 1, 'failed', worker.workerId],
        ['activity', 2, 2, 'completed', worker.workerId],
      ]);
      expect(step?.token).toBe(step?.attempts[1]?.token);
      expect(BigInt(step?.attempts[1]?.token ?? 0)).toBeGreaterThan(BigInt(step?.attempts[0]?.token ?? 0));
      // Turns: one scheduled shaky, the last completed the run (the activity's retry needs no turn).
      expect(d.turns.length).toBeGreaterThanOrEqual(2);
      expect(d.turns.every((t) => t.kind === 'turn' && t.stepId === null && t.outcome === 'completed')).toBe(
        true,
      );
      expect(d.turns.map((t) => t.epoch)).toEqual(d.turns.map((_, i) => i + 1));
      const types = d.events.map((e) => e.type);
      expect(types[0]).toBe('run:started');
      expect(types).toContain('step:scheduled');
      expect(types.filter((t) => t === 'attempt:claimed')).toHaveLength(2);
      expect(types).toContain('attempt:failed');
      expect(types.at(-1)).toBe('run:completed');
    });

    it('lists runs newest first, filtered by status and name, up to a limit', async () => {
      const parked = noInputWorkflow('parked', z.null(), () => Promise.resolve(null));
      const engine = await target.engine();
      const greeted = [];
      for (const name of ['a', 'b', 'c']) greeted.push(await engine.client.start(greet, { name }));
      const waiting = await engine.client.start(parked, {});
      await startWorker(engine, [greet]);
      await Promise.all(greeted.map((h) => h.result({ timeoutMs: 15_000 })));

      expect((await engine.client.list()).map((r) => r.id).sort()).toEqual(
        [...greeted.map((h) => h.runId), waiting.runId].sort(),
      );
      const completed = await engine.client.list({ status: 'completed' });
      expect(completed.map((r) => r.name)).toEqual(['greet', 'greet', 'greet']);
      expect(completed.map((r) => r.output).sort()).toEqual(['hello a', 'hello b', 'hello c']);
      expect((await engine.client.list({ status: 'pending' })).map((r) => r.id)).toEqual([waiting.runId]);
      expect((await engine.client.list({ name: 'parked' })).map((r) => r.status)).toEqual(['pending']);
      expect(await engine.client.list({ name: 'greet', status: 'failed' })).toEqual([]);
      expect(await engine.client.list({ limit: 2 })).toHaveLength(2);
      const all = await engine.client.list();
      const created = all.map((r) => r.createdAt.toISOString());
      expect(created).toEqual([...created].sort().reverse());
    });

    it('retries a failed run from its history: completed steps are not run again, tokens and epochs keep growing', async () => {
      const executions: string[] = [];
      let healthy = false;
      const prepare = noInputActivity('prepare', z.string(), () => {
        executions.push('prepare');
        return Promise.resolve('prepared');
      });
      const ship = defineActivity({
        name: 'ship',
        input: z.string(),
        output: z.string(),
        retry: { maximumAttempts: 2, initialIntervalMs: 10, jitter: 0 },
        run: (s) => {
          executions.push('ship');
          if (!healthy) throw new Error('carrier down');
          return Promise.resolve(`${s} and shipped`);
        },
      });
      const order = noInputWorkflow('order', z.string(), async (ctx) => {
        const prepared = await ctx.run(prepare, {});
        return ctx.run(ship, prepared);
      });
      const engine = await target.engine();
      await startWorker(engine, [order, prepare, ship], { pollIntervalMs: 50 });
      const handle = await engine.client.start(order, {});
      const failure = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(RunFailedError);
      expect((failure as RunFailedError).failure.code).toBe('ACTIVITY_FAILURE');
      expect(executions).toEqual(['prepare', 'ship', 'ship']);
      const before = await attemptsOf(engine, handle.runId);

      healthy = true;
      const retried = await engine.client.retry(handle.runId);
      expect(retried.runId).toBe(handle.runId);
      await expect(retried.result({ timeoutMs: 15_000 })).resolves.toBe('prepared and shipped');
      expect(executions).toEqual(['prepare', 'ship', 'ship', 'ship']);

      const after = await attemptsOf(engine, handle.runId);
      expect(after.slice(0, before.length)).toEqual(before.map((a) => ({ ...a, outcome: a.outcome })));
      const added = after.slice(before.length);
      // The retry claimed the step under a fresh budget (attempt 1) but the third epoch, and new turns.
      expect(
        added.filter((a) => a.kind === 'activity').map((a) => [a.seq, a.attempt, a.epoch, a.outcome]),
      ).toEqual([[1, 1, 3, 'completed']]);
      const turnEpochs = after.filter((a) => a.kind === 'turn').map((a) => a.epoch);
      expect(turnEpochs).toEqual(turnEpochs.map((_, i) => i + 1));
      const maxBefore = before.reduce((m, a) => (BigInt(a.token) > m ? BigInt(a.token) : m), 0n);
      for (const a of added) expect(BigInt(a.token)).toBeGreaterThan(maxBefore);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.name, s.status, s.attempt, s.epoch])).toEqual([
        ['prepare', 'completed', 1, 1],
        ['ship', 'completed', 1, 3],
      ]);
      const events = (await handle.describe()).events.map((e) => e.type);
      expect(events).toContain('run:retry-requested');
      expect(events.filter((t) => t === 'run:failed')).toHaveLength(1);
      expect(events.at(-1)).toBe('run:completed');
    });

    for (const fuseSteps of [false, true]) {
      it(`records the turn whose code failed the run as failed, the turns before it completed (fuseSteps: ${fuseSteps})`, async () => {
        const step = emptyActivity('step');
        const broken = defineWorkflow({
          name: 'broken',
          input: z.object({}),
          output: z.string(),
          async run(_input, ctx) {
            await ctx.run(step, {});
            throw new Error('the code threw');
          },
        });
        const engine = await target.engine();
        const worker = engine.worker({
          workflows: [broken],
          activities: [step],
          fuseSteps,
          pollIntervalMs: 50,
        });
        await worker.start();
        const handle = await engine.client.start(broken, {});
        await expect(handle.result({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(RunFailedError);
        const { turns } = await handle.describe();
        expect(turns.map((t) => t.outcome)).toEqual([...turns.slice(1).map(() => 'completed'), 'failed']);
        expect(turns.length).toBeGreaterThanOrEqual(2);
      });
    }

    it('retries a run that compensated: the steps scheduled after the failure are retired, not replayed', async () => {
      const executions: string[] = [];
      let healthy = false;
      const charge = noInputActivity(
        'charge',
        z.string(),
        () => {
          executions.push('charge');
          if (!healthy) throw new Error('card declined');
          return Promise.resolve('charged');
        },
        { retry: { maximumAttempts: 1 } },
      );
      const refund = noInputActivity('refund', z.string(), () => {
        executions.push('refund');
        return Promise.resolve('refunded');
      });
      const ship = defineActivity({
        name: 'ship',
        input: z.string(),
        output: z.string(),
        run: (s) => {
          executions.push('ship');
          return Promise.resolve(`${s} and shipped`);
        },
      });
      const saga = noInputWorkflow('saga', z.string(), async (ctx) => {
        const at = ctx.now(); // a recorded value before the failure: kept and replayed
        let charged: string;
        try {
          charged = await ctx.run(charge, {});
        } catch (error) {
          await ctx.run(refund, {}); // compensation, scheduled after the failure was delivered
          ctx.now(); // a recorded value after the failure: retired with the compensation
          throw error;
        }
        return `${await ctx.run(ship, charged)} at ${at.getTime() > 0 ? 'a time' : 'no time'}`;
      });
      const engine = await target.engine();
      await startWorker(engine, [saga, charge, refund, ship], { pollIntervalMs: 50 });
      const handle = await engine.client.start(saga, {});
      await expect(handle.result({ timeoutMs: 15_000 })).rejects.toBeInstanceOf(RunFailedError);
      expect(executions).toEqual(['charge', 'refund']);
      const before = await stepsOf(engine, handle.runId);

      healthy = true;
      await engine.client.retry(handle.runId);
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('charged and shipped at a time');
      expect(executions).toEqual(['charge', 'refund', 'charge', 'ship']);

      const rows = await engine.database.rows<{
        seq: number;
        name: string;
        status: string;
        retired: boolean;
        after_delivered_seq: number;
      }>(sql`
        SELECT seq, name, status, retired_at IS NOT NULL AS retired, after_delivered_seq
          FROM ${engine.names.steps} WHERE run_id = ${handle.runId}::uuid ORDER BY seq, created_at`);
      expect(rows.map((r) => [r.seq, r.name, r.status, r.retired])).toEqual([
        [0, 'now', 'completed', false],
        [1, 'charge', 'completed', false],
        [2, 'refund', 'completed', true],
        [2, 'ship', 'completed', false],
        [3, 'now', 'completed', true],
      ]);
      // The value recorded before the failure was replayed, not drawn again.
      const nowBefore = before.find((s) => s.seq === 0);
      const nowAfter = (await stepsOf(engine, handle.runId)).find((s) => s.seq === 0 && s.name === 'now');
      expect(nowAfter?.output).toEqual(nowBefore?.output);
      const events = (await handle.describe()).events.map((e) => e.type);
      expect(events.filter((t) => t === 'step:retired')).toHaveLength(2);
      expect(events.at(-1)).toBe('run:completed');
    });

    it('refuses to retry a run that did not fail, and an unknown run', async () => {
      const engine = await target.engine();
      await startWorker(engine, [greet]);
      const handle = await engine.client.start(greet, { name: 'x' });
      await handle.result({ timeoutMs: 15_000 });
      await expect(engine.client.retry(handle.runId)).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });
      await expect(engine.client.retry('00000000-0000-4000-8000-000000000000')).rejects.toMatchObject({
        code: 'RUN_NOT_FOUND',
      });
      await expect(
        engine.client.getHandle('00000000-0000-4000-8000-000000000000').result(),
      ).rejects.toBeInstanceOf(PalisadeError);
    });
  });
}
