import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, dbNowMs, runOf, stepsOf, stepsReach } from './workflow-rows.js';
import { startWorker } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const HOUR_MS = 3_600_000;

/** step A → sleep 1 h → step B, counting executions per step name. */
function napFixture() {
  const executions: string[] = [];
  const mark = defineActivity({
    name: 'mark',
    input: z.object({ step: z.string() }),
    output: z.string(),
    run({ step }) {
      executions.push(step);
      return Promise.resolve(step);
    },
  });
  const nap = noInputWorkflow('nap', z.array(z.string()), async (ctx) => {
    const a = await ctx.run(mark, { step: 'A' });
    await ctx.sleep('1h');
    const b = await ctx.run(mark, { step: 'B' });
    return [a, b];
  });
  return { executions, mark, nap };
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`durable timers on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('holds no lease while sleeping, fixes the due time at start, and fires by time travel', async () => {
      const { executions, mark, nap } = napFixture();
      const engine = await target.engine();
      const worker = await startWorker(engine, [nap, mark], { pollIntervalMs: 50 });
      const handle = await engine.client.start(nap, {});
      await stepsReach([worker], engine, handle.runId, (steps) => steps.length === 2, 'the timer step');
      const [, timer] = await stepsOf(engine, handle.runId);
      const startedEvent = (await handle.describe()).events.find((e) => e.type === 'timer:started');
      const startedAtMs = startedEvent?.at.getTime() ?? NaN;
      expect(timer).toMatchObject({ seq: 1, kind: 'timer', name: 'sleep', status: 'scheduled', token: null });
      expect(Math.abs((timer?.next_run_at_ms ?? 0) - startedAtMs - HOUR_MS)).toBeLessThan(1_000);

      // While sleeping: no running step, no live turn lease, no open attempt of the run.
      const checkAsleep = async () => {
        expect((await stepsOf(engine, handle.runId)).filter((s) => s.status === 'running')).toEqual([]);
        const run = await runOf(engine, handle.runId);
        expect(run.status).toBe('running');
        expect(run.turn_lease_expires_at).toBeNull();
        expect(run.turn_next_run_at_ms).toBe(timer?.next_run_at_ms);
        expect((await attemptsOf(engine, handle.runId)).filter((a) => a.outcome === null)).toEqual([]);
      };
      await checkAsleep();
      // Half way: the due time has not moved, nothing has woken up, still no lease held.
      await advanceClock(engine, HOUR_MS / 2);
      await checkAsleep();
      expect((await stepsOf(engine, handle.runId))[1]?.next_run_at_ms).toBe(timer?.next_run_at_ms);

      await advanceClock(engine, HOUR_MS / 2);
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual(['A', 'B']);
      expect(executions).toEqual(['A', 'B']);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.kind, s.name, s.status])).toEqual([
        ['activity', 'mark', 'completed'],
        ['timer', 'sleep', 'completed'],
        ['activity', 'mark', 'completed'],
      ]);
      // B was claimed at or after the due time, by the database clock.
      const bClaim = (await attemptsOf(engine, handle.runId)).find((a) => a.seq === 2);
      expect(bClaim?.claimed_at_ms).toBeGreaterThanOrEqual(timer?.next_run_at_ms ?? Infinity);
      const events = (await handle.describe()).events.map((e) => e.type);
      expect(events.filter((t) => t === 'timer:fired')).toHaveLength(1);
    });

    it('sleeps until an absolute date taken from ctx.now()', async () => {
      const dates: number[] = [];
      const until2h = noInputWorkflow('until-2h', z.number(), async (ctx) => {
        const wake = new Date(ctx.now().getTime() + 2 * HOUR_MS);
        dates.push(wake.getTime());
        await ctx.sleepUntil(wake);
        return wake.getTime();
      });
      const engine = await target.engine();
      // No kept instances: every turn replays the code from the top, which is what this test is about.
      const worker = await startWorker(engine, [until2h], { pollIntervalMs: 50, workflowCacheSize: 0 });
      const before = await dbNowMs(engine);
      const handle = await engine.client.start(until2h, {});
      await stepsReach([worker], engine, handle.runId, (steps) => steps.length === 2, 'the timer step');
      const [now, timer] = await stepsOf(engine, handle.runId);
      expect(now).toMatchObject({ kind: 'value', name: 'now', status: 'completed' });
      expect(now?.output).toBeGreaterThanOrEqual(before);
      expect(timer?.next_run_at_ms).toBe((now?.output as number) + 2 * HOUR_MS);
      await advanceClock(engine, 2 * HOUR_MS);
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe((now?.output as number) + 2 * HOUR_MS);
      expect(new Set(dates).size).toBe(1);
      expect(dates.length).toBeGreaterThanOrEqual(2);
    });

    it('gives ctx.now, ctx.random and ctx.uuid the same values on every replay', async () => {
      const observed: string[] = [];
      const tick = pureActivity('tick', z.number(), z.number(), (n) => n + 1);
      const values = noInputWorkflow(
        'values',
        z.object({ now: z.number(), random: z.number(), uuid: z.string(), later: z.number() }),
        async (ctx) => {
          const now = ctx.now().getTime();
          const random = ctx.random();
          const uuid = ctx.uuid();
          observed.push(JSON.stringify([now, random, uuid]));
          let n = await ctx.run(tick, 0);
          await ctx.sleep('10m');
          n = await ctx.run(tick, n);
          await ctx.sleep('10m');
          const later = ctx.now().getTime();
          await ctx.run(tick, n);
          return { now, random, uuid, later };
        },
      );
      const engine = await target.engine();
      // No kept instances: every turn replays the code from the top, which is what this test is about.
      const worker = await startWorker(engine, [values, tick], { pollIntervalMs: 50, workflowCacheSize: 0 });
      const handle = await engine.client.start(values, {});
      for (let i = 1; i <= 2; i++) {
        await stepsReach(
          [worker],
          engine,
          handle.runId,
          (steps) => steps.filter((s) => s.kind === 'timer').length === i,
          `timer ${i}`,
        );
        await advanceClock(engine, 10 * 60_000);
      }
      const output = await handle.result({ timeoutMs: 15_000 });
      // Six turns replayed the code; every one of them saw the values recorded by the first.
      expect(observed.length).toBeGreaterThanOrEqual(6);
      expect(new Set(observed)).toEqual(new Set([JSON.stringify([output.now, output.random, output.uuid])]));
      expect(output.later - output.now).toBeGreaterThanOrEqual(20 * 60_000);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.filter((s) => s.kind === 'value').map((s) => [s.seq, s.name, s.output])).toEqual([
        [0, 'now', output.now],
        [1, 'random', output.random],
        [2, 'uuid', output.uuid],
        [7, 'now', output.later],
      ]);
    });

    it('finishes a run whose worker stopped mid-sleep on a new worker, without re-running a completed step', async () => {
      const { executions, mark, nap } = napFixture();
      const engine = await target.engine();
      const first = await startWorker(engine, [nap, mark], { pollIntervalMs: 50, workerId: 'first' });
      const handle = await engine.client.start(nap, {});
      await stepsReach([first], engine, handle.runId, (steps) => steps.length === 2, 'the timer step');
      await first.stop();
      await advanceClock(engine, HOUR_MS + 1_000);
      // Nothing runs while no worker is up, even though the timer is due.
      expect((await runOf(engine, handle.runId)).status).toBe('running');
      await startWorker(engine, [nap, mark], { pollIntervalMs: 50, workerId: 'second' });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual(['A', 'B']);
      expect(executions).toEqual(['A', 'B']);
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.filter((a) => a.seq === 0).map((a) => a.worker_id)).toEqual(['first']);
      expect(attempts.filter((a) => a.seq === 2).map((a) => a.worker_id)).toEqual(['second']);
      expect(attempts.filter((a) => a.kind === 'turn').at(-1)?.worker_id).toBe('second');
    });
  });
}
