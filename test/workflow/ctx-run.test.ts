import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ActivityFailure, ApplicationFailure, defineActivity, defineWorkflow } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, deferred, stepsOf, turnLog, lastTurn, stepsReach } from './workflow-rows.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const num = z.object({ n: z.number() });

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`ctx.run on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('runs steps in sequence, each exactly once, over several turns, and returns the output', async () => {
      const executions: number[] = [];
      const add = defineActivity({
        name: 'add',
        input: num,
        output: num,
        run({ n }) {
          executions.push(n);
          return Promise.resolve({ n: n + 1 });
        },
      });
      const chain = defineWorkflow({
        name: 'chain',
        input: num,
        output: z.object({ total: z.number() }),
        async run({ n }, ctx) {
          const a = await ctx.run(add, { n });
          const b = await ctx.run(add, { n: a.n * 10 });
          const c = await ctx.run(add, { n: b.n * 10 });
          return { total: c.n };
        },
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [chain, add]);
      const turns = turnLog(worker);
      await worker.start();
      const handle = await engine.client.start(chain, { n: 1 });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({ total: 211 });
      // result() wakes on the NOTIFY of the commit, which can arrive before the worker reports that commit.
      await lastTurn(worker, turns, handle.runId);

      // Every completed step was replayed by every later turn, yet each activity ran exactly once.
      expect(executions).toEqual([1, 20, 210]);
      expect(turns.filter((t) => t.runId === handle.runId).map((t) => t.outcome)).toEqual([
        'blocked',
        'blocked',
        'blocked',
        'completed',
      ]);
      const steps = await stepsOf(engine, handle.runId);
      expect(
        steps.map((s) => [s.seq, s.kind, s.name, s.status, s.attempt, s.epoch, s.delivered_seq]),
      ).toEqual([
        [0, 'activity', 'add', 'completed', 1, 1, 1],
        [1, 'activity', 'add', 'completed', 1, 1, 2],
        [2, 'activity', 'add', 'completed', 1, 1, 3],
      ]);
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.map((a) => [a.kind, a.seq, a.outcome])).toEqual([
        ['turn', null, 'completed'],
        ['activity', 0, 'completed'],
        ['turn', null, 'completed'],
        ['activity', 1, 'completed'],
        ['turn', null, 'completed'],
        ['activity', 2, 'completed'],
        ['turn', null, 'completed'],
      ]);
      // Every claim, of a turn or a step, took a new token from the one global sequence.
      const tokens = attempts.map((a) => BigInt(a.token));
      expect(tokens).toEqual([...tokens].sort((x, y) => (x < y ? -1 : 1)));
      expect(new Set(tokens).size).toBe(tokens.length);
      const description = await handle.describe();
      expect(description.run.status).toBe('completed');
      expect(description.events.filter((e) => e.type === 'run:completed')).toHaveLength(1);
    });

    it('runs Promise.all branches at the same time and returns their outputs in call order', async () => {
      const bothStarted = { left: deferred(), right: deferred() };
      const side = defineActivity({
        name: 'side',
        input: z.object({ side: z.enum(['left', 'right']) }),
        output: z.string(),
        async run({ side }) {
          bothStarted[side].resolve();
          // Each branch finishes only once the other one has started: they must run concurrently.
          await bothStarted[side === 'left' ? 'right' : 'left'].promise;
          return side.toUpperCase();
        },
      });
      const pair = noInputWorkflow('pair', z.array(z.string()), async (ctx) => {
        return Promise.all([ctx.run(side, { side: 'left' }), ctx.run(side, { side: 'right' })]);
      });
      const engine = await target.engine();
      await startWorker(engine, [pair, side], { concurrency: 2 });
      const handle = await engine.client.start(pair, {});
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual(['LEFT', 'RIGHT']);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.seq, s.status])).toEqual([
        [0, 'completed'],
        [1, 'completed'],
      ]);
      // Both steps were scheduled by the first turn, in one commit.
      expect(steps[0]?.created_at_ms).toBeCloseTo(steps[1]?.created_at_ms ?? 0, -2);
    });

    it('settles Promise.allSettled with an ActivityFailure for the failed branch', async () => {
      const maybe = defineActivity({
        name: 'maybe',
        input: z.object({ fail: z.boolean() }),
        output: z.string(),
        retry: { maximumAttempts: 1 },
        run({ fail }) {
          if (fail) throw ApplicationFailure.nonRetryable('no stock', 'OutOfStock', { sku: 'A1' });
          return Promise.resolve('ok');
        },
      });
      const settle = noInputWorkflow('settle', z.array(z.unknown()), async (ctx) => {
        const results = await Promise.allSettled([
          ctx.run(maybe, { fail: false }),
          ctx.run(maybe, { fail: true }),
        ]);
        return results.map((r) =>
          r.status === 'fulfilled'
            ? r.value
            : {
                activityFailure: r.reason instanceof ActivityFailure,
                type: (r.reason as ActivityFailure).failure.type,
                details: (r.reason as ActivityFailure).failure.details,
              },
        );
      });
      const engine = await target.engine();
      await startWorker(engine, [settle, maybe]);
      const handle = await engine.client.start(settle, {});
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual([
        'ok',
        { activityFailure: true, type: 'OutOfStock', details: { sku: 'A1' } },
      ]);
    });

    it('keeps the Promise.race winner on every later replay', async () => {
      const releaseSlow = deferred();
      const afterStarted = deferred();
      const releaseAfter = deferred();
      const executions: string[] = [];
      const racer = defineActivity({
        name: 'racer',
        input: z.object({ who: z.string() }),
        output: z.string(),
        async run({ who }) {
          executions.push(who);
          if (who === 'slow') await releaseSlow.promise;
          if (who === 'after') {
            afterStarted.resolve();
            await releaseAfter.promise;
          }
          return who;
        },
      });
      const seen: string[] = [];
      const race = noInputWorkflow(
        'race',
        z.object({ winner: z.string(), after: z.string() }),
        async (ctx) => {
          const winner = await Promise.race([
            ctx.run(racer, { who: 'slow' }),
            ctx.run(racer, { who: 'fast' }),
          ]);
          seen.push(winner);
          const after = await ctx.run(racer, { who: 'after' });
          return { winner, after };
        },
      );
      const engine = await target.engine();
      // No kept instances: every turn replays the code from the top, which is what this test is about.
      const worker = await startWorker(engine, [race, racer], { concurrency: 3, workflowCacheSize: 0 });
      const handle = await engine.client.start(race, {});
      await afterStarted.promise;
      // The loser finishes while `after` runs: the next turns see both race outcomes completed.
      releaseSlow.resolve();
      await stepsReach([worker], engine, handle.runId, (steps) => steps[0]?.status === 'completed', 'slow');
      releaseAfter.resolve();
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({ winner: 'fast', after: 'after' });
      expect(seen.length).toBeGreaterThanOrEqual(2);
      expect(new Set(seen)).toEqual(new Set(['fast']));
      expect(executions.sort()).toEqual(['after', 'fast', 'slow']);
    });

    it('lets the workflow catch a failed step as an ActivityFailure and go on', async () => {
      let charges = 0;
      const charge = defineActivity({
        name: 'charge',
        input: num,
        output: z.string(),
        retry: { maximumAttempts: 2, initialIntervalMs: 10, jitter: 0 },
        run() {
          charges++;
          throw new ApplicationFailure('card declined', {
            type: 'CardDeclined',
            details: { retryable: true },
          });
        },
      });
      const notify = pureActivity('notify', z.string(), z.string(), (s) => `told ${s}`);
      const checkout = defineWorkflow({
        name: 'checkout',
        input: num,
        output: z.object({ charged: z.boolean(), why: z.string(), type: z.string(), told: z.string() }),
        async run(input, ctx) {
          try {
            await ctx.run(charge, input);
            return { charged: true, why: '', type: '', told: '' };
          } catch (error) {
            if (!(error instanceof ActivityFailure)) throw error;
            const told = await ctx.run(notify, error.activityName);
            return { charged: false, why: error.failure.message, type: error.failure.type, told };
          }
        },
      });
      const engine = await target.engine();
      await startWorker(engine, [checkout, charge, notify]);
      const handle = await engine.client.start(checkout, { n: 5 });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({
        charged: false,
        why: 'card declined',
        type: 'CardDeclined',
        told: 'told charge',
      });
      expect(charges).toBe(2);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.name, s.status, s.attempt, s.epoch])).toEqual([
        ['charge', 'failed', 2, 2],
        ['notify', 'completed', 1, 1],
      ]);
    });

    it('applies per-call overrides of retry, timeouts and queue to the step it schedules', async () => {
      let calls = 0;
      const flaky = defineActivity({
        name: 'flaky',
        input: num,
        output: num,
        retry: { maximumAttempts: 1 },
        leaseMs: '4s',
        startToCloseTimeoutMs: '10m',
        run({ n }, ctx) {
          calls++;
          if (calls < 3) throw new Error(`transient ${calls}`);
          return Promise.resolve({ n: n + ctx.info.attempt });
        },
      });
      const wf = defineWorkflow({
        name: 'overrides',
        input: num,
        output: num,
        async run(input, ctx) {
          return ctx.run(flaky, input, {
            retry: { maximumAttempts: 3, initialIntervalMs: 5, backoffCoefficient: 1, jitter: 0 },
            leaseMs: '30s',
            startToCloseTimeoutMs: '20s',
            queue: 'side-queue',
          });
        },
      });
      const engine = await target.engine();
      // The workflow's turns run on `default`; only a worker of `side-queue` can run the step.
      await startWorker(engine, [wf]);
      const sideWorker = await startWorker(engine, [flaky], { queues: ['side-queue'] });
      const claimedBy: string[] = [];
      sideWorker.events.on('attempt:claimed', (e) => claimedBy.push(e.activity));
      const handle = await engine.client.start(wf, { n: 100 });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({ n: 103 });
      const [step] = await stepsOf(engine, handle.runId);
      expect(step).toMatchObject({
        queue: 'side-queue',
        lease_ms: 30_000,
        start_to_close_timeout_ms: 20_000,
        attempt: 3,
        epoch: 3,
        retry_policy: expect.objectContaining({ maximumAttempts: 3, initialIntervalMs: 5 }) as unknown,
      });
      expect(claimedBy).toEqual(['flaky', 'flaky', 'flaky']);
      const attempts = (await attemptsOf(engine, handle.runId)).filter((a) => a.kind === 'activity');
      expect(attempts.map((a) => [a.attempt, a.epoch, a.outcome, a.worker_id])).toEqual([
        [1, 1, 'failed', sideWorker.workerId],
        [2, 2, 'failed', sideWorker.workerId],
        [3, 3, 'completed', sideWorker.workerId],
      ]);
    });
  });
}
