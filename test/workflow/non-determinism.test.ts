/**
 * F10 — workflow code changed under in-flight runs (shared/cases/FAILURE-CASES.md).
 * v1 `onboard`: createUser → sendWelcome → sleep 10 s → sendFollowup. Runs start on v1; during the sleep the
 * v1 worker stops and a worker with a v2 definition of the same name takes over.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  defineActivity,
  defineSignal,
  defineWorkflow,
  RunFailedError,
  type WorkflowContext,
} from '@palisade/sdk';
import { advanceClock, setClockOffset } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { runOf, stepOfKindReached, stepsOf, stepsReach } from './workflow-rows.js';
import { checkOnEvents } from '../support/wait.js';

const RUNS = 10;
const user = z.object({ user: z.string() });

function fixture() {
  /** The ledger: one entry per execution of each activity, by run input. */
  const ledger: string[] = [];
  const activity = (name: string) =>
    defineActivity({
      name,
      input: user,
      output: z.string(),
      run({ user }) {
        ledger.push(`${name}:${user}`);
        return Promise.resolve(`${name}(${user})`);
      },
    });
  const acts = {
    createUser: activity('createUser'),
    sendWelcome: activity('sendWelcome'),
    sendHello: activity('sendHello'),
    sendFollowup: activity('sendFollowup'),
    audit: activity('audit'),
  };
  const v1 = defineWorkflow({
    name: 'onboard',
    input: user,
    output: z.array(z.string()),
    async run(input, ctx) {
      const created = await ctx.run(acts.createUser, input);
      const welcomed = await ctx.run(acts.sendWelcome, input);
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
  });
  const v2: Record<string, (input: { user: string }, ctx: WorkflowContext) => Promise<string[]>> = {
    renamed: async (input, ctx) => {
      const created = await ctx.run(acts.createUser, input);
      const welcomed = await ctx.run(acts.sendHello, input);
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
    swapped: async (input, ctx) => {
      const welcomed = await ctx.run(acts.sendWelcome, input);
      const created = await ctx.run(acts.createUser, input);
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
    inserted: async (input, ctx) => {
      const created = await ctx.run(acts.createUser, input);
      const welcomed = await ctx.run(acts.sendWelcome, input);
      await ctx.run(acts.audit, input);
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
    'body changed': async (input, ctx) => {
      const created = await ctx.run(acts.createUser, { user: input.user.toUpperCase() });
      const welcomed = await ctx.run(acts.sendWelcome, input);
      await ctx.sleep('10s');
      return [`${created}!`, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
    'step added after the sleep': async (input, ctx) => {
      const created = await ctx.run(acts.createUser, input);
      const welcomed = await ctx.run(acts.sendWelcome, input);
      await ctx.sleep('10s');
      const followed = await ctx.run(acts.sendFollowup, input);
      await ctx.run(acts.audit, input);
      return [created, welcomed, followed];
    },
    // The same three changes under a patch: runs recorded before the change replay the old branch.
    'renamed, patched': async (input, ctx) => {
      const created = await ctx.run(acts.createUser, input);
      const welcomed = ctx.patched('say-hello')
        ? await ctx.run(acts.sendHello, input)
        : await ctx.run(acts.sendWelcome, input);
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
    'swapped, patched': async (input, ctx) => {
      let created: string;
      let welcomed: string;
      if (ctx.patched('welcome-first')) {
        welcomed = await ctx.run(acts.sendWelcome, input);
        created = await ctx.run(acts.createUser, input);
      } else {
        created = await ctx.run(acts.createUser, input);
        welcomed = await ctx.run(acts.sendWelcome, input);
      }
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
    'inserted, patched': async (input, ctx) => {
      const created = await ctx.run(acts.createUser, input);
      const welcomed = await ctx.run(acts.sendWelcome, input);
      if (ctx.patched('audit-before-sleep')) await ctx.run(acts.audit, input);
      await ctx.sleep('10s');
      return [created, welcomed, await ctx.run(acts.sendFollowup, input)];
    },
  };
  const version2 = (variant: string) =>
    defineWorkflow({ name: 'onboard', input: user, output: z.array(z.string()), run: v2[variant] as never });
  return { ledger, acts, v1, version2 };
}

const failing = [
  { variant: 'renamed', position: 1, recorded: 'activity sendWelcome', current: 'activity sendHello' },
  { variant: 'swapped', position: 0, recorded: 'activity createUser', current: 'activity sendWelcome' },
  { variant: 'inserted', position: 2, recorded: 'timer sleep', current: 'activity audit' },
] as const;

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`F10 code changed under in-flight runs, on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    /** Start RUNS runs on v1, wait until all sleep, stop v1, start v2 and let the timers fall due. */
    async function deployDuringSleep(variant: string) {
      const { ledger, acts, v1, version2 } = fixture();
      const engine = await target.engine();
      const activities = Object.values(acts);
      const w1 = engine.worker({ workflows: [v1], activities, pollIntervalMs: 50, workerId: 'v1' });
      await w1.start();
      const handles = await Promise.all(
        Array.from({ length: RUNS }, (_, i) => engine.client.start(v1, { user: `u${i}` })),
      );
      const asleep = async () => {
        for (const h of handles) {
          const steps = await stepsOf(engine, h.runId);
          if (steps[2]?.kind !== 'timer') return false;
        }
        return true;
      };
      await checkOnEvents([w1], asleep, `${RUNS} runs asleep`);
      await w1.stop();
      const w2 = engine.worker({
        workflows: [version2(variant)],
        activities,
        pollIntervalMs: 50,
        workerId: 'v2',
      });
      await w2.start();
      await advanceClock(engine, 10_000);
      const outcomes = await Promise.all(
        handles.map((h) =>
          h.result({ timeoutMs: 20_000 }).then(
            (output) => ({ output }),
            (error: unknown) => ({ error }),
          ),
        ),
      );
      return { engine, ledger, handles, outcomes, w2 };
    }

    it.each(failing)(
      'fails every run with NON_DETERMINISM when a step was $variant, naming position and both names',
      async ({ variant, position, recorded, current }) => {
        const { engine, ledger, handles, outcomes } = await deployDuringSleep(variant);
        for (const [i, outcome] of outcomes.entries()) {
          expect(outcome).toHaveProperty('error');
          const error = (outcome as { error: RunFailedError }).error;
          expect(error).toBeInstanceOf(RunFailedError);
          expect(error.failure.code).toBe('NON_DETERMINISM');
          expect(error.failure.message).toContain(`replayed step ${position} as ${current}`);
          expect(error.failure.message).toContain(`history recorded ${recorded}`);
          const run = await runOf(engine, handles[i]?.runId ?? '');
          expect(run.status).toBe('failed');
          // Nothing was scheduled by v2, and the pending timer ended with the run.
          const steps = await stepsOf(engine, handles[i]?.runId ?? '');
          expect(steps.map((s) => [s.seq, s.name, s.status])).toEqual([
            [0, 'createUser', 'completed'],
            [1, 'sendWelcome', 'completed'],
            [2, 'sleep', 'cancelled'],
          ]);
        }
        // No side effect ran again, and none of another name ran on a recorded result.
        expect(ledger.filter((e) => e.startsWith('createUser:'))).toHaveLength(RUNS);
        expect(ledger.filter((e) => e.startsWith('sendWelcome:'))).toHaveLength(RUNS);
        expect(ledger.filter((e) => !e.startsWith('createUser:') && !e.startsWith('sendWelcome:'))).toEqual(
          [],
        );
        expect(new Set(ledger).size).toBe(ledger.length);
      },
    );

    it.each([
      { variant: 'renamed, patched', newRun: ['createUser', 'sendHello'], newOutput: 'sendHello' },
      { variant: 'swapped, patched', newRun: ['sendWelcome', 'createUser'], newOutput: 'sendWelcome' },
      {
        variant: 'inserted, patched',
        newRun: ['createUser', 'sendWelcome', 'audit'],
        newOutput: 'sendWelcome',
      },
    ])(
      'completes every run when the change is $variant: old runs replay the old branch, new runs take the new one',
      async ({ variant, newRun, newOutput }) => {
        const { engine, ledger, outcomes, w2 } = await deployDuringSleep(variant);
        for (const [i, outcome] of outcomes.entries()) {
          expect(outcome).toEqual({
            output: [`createUser(u${i})`, `sendWelcome(u${i})`, `sendFollowup(u${i})`],
          });
        }
        // The old runs ran nothing of the new branch, and nothing twice.
        expect(ledger.filter((e) => e.startsWith('sendHello:') || e.startsWith('audit:'))).toEqual([]);
        expect(new Set(ledger).size).toBe(ledger.length);

        const fresh = await engine.client.start(fixture().version2(variant), { user: 'new' });
        await stepOfKindReached([w2], engine, fresh.runId, 'timer', 'the new run asleep');
        await advanceClock(engine, 10_000);
        const output = await fresh.result({ timeoutMs: 20_000 });
        expect(output).toEqual(['createUser(new)', `${newOutput}(new)`, 'sendFollowup(new)']);
        const steps = await stepsOf(engine, fresh.runId);
        expect(steps.filter((s) => s.kind === 'activity').map((s) => s.name)).toEqual([
          ...newRun,
          'sendFollowup',
        ]);
        expect(steps.filter((s) => s.kind === 'value').map((s) => s.name)).toEqual([
          `patch:${{ 'renamed, patched': 'say-hello', 'swapped, patched': 'welcome-first', 'inserted, patched': 'audit-before-sleep' }[variant]}`,
        ]);
      },
    );

    it.each(['body changed', 'step added after the sleep'])(
      'completes every run when only the %s (control)',
      async (variant) => {
        const { ledger, outcomes } = await deployDuringSleep(variant);
        for (const [i, outcome] of outcomes.entries()) {
          expect(outcome).toHaveProperty('output');
          const prefix = variant === 'body changed' ? `createUser(u${i})!` : `createUser(u${i})`;
          expect((outcome as { output: string[] }).output).toEqual([
            prefix,
            `sendWelcome(u${i})`,
            `sendFollowup(u${i})`,
          ]);
        }
        // createUser ran once per run, on v1's input: the recorded result was reused, not recomputed.
        expect(ledger.filter((e) => e.startsWith('createUser:')).sort()).toEqual(
          Array.from({ length: RUNS }, (_, i) => `createUser:u${i}`).sort(),
        );
        expect(ledger.filter((e) => e.startsWith('sendFollowup:'))).toHaveLength(RUNS);
        expect(ledger.filter((e) => e.startsWith('audit:'))).toHaveLength(
          variant === 'body changed' ? 0 : RUNS,
        );
      },
    );

    it('fails a run whose new code returns before a recorded step (a step was removed)', async () => {
      const { ledger, acts, v1 } = fixture();
      const engine = await target.engine();
      const w1 = engine.worker({ workflows: [v1], activities: Object.values(acts), pollIntervalMs: 50 });
      await w1.start();
      const handle = await engine.client.start(v1, { user: 'solo' });
      await stepsReach([w1], engine, handle.runId, (steps) => steps[2]?.kind === 'timer', 'asleep');
      await w1.stop();
      const shortened = defineWorkflow({
        name: 'onboard',
        input: user,
        output: z.array(z.string()),
        run: async (input, ctx) => [await ctx.run(acts.createUser, input)],
      });
      const w2 = engine.worker({
        workflows: [shortened],
        activities: Object.values(acts),
        pollIntervalMs: 50,
      });
      await w2.start();
      await advanceClock(engine, 10_000);
      const error = await handle.result({ timeoutMs: 20_000 }).then(
        () => undefined,
        (e: unknown) => e as RunFailedError,
      );
      expect(error?.failure.code).toBe('NON_DETERMINISM');
      expect(error?.failure.message).toContain('replayed step 1 as no call (the workflow ended first)');
      expect(error?.failure.message).toContain('history recorded activity sendWelcome');
      expect(ledger).toEqual(['createUser:solo', 'sendWelcome:solo']);
    });
  });
}

/** What workflow code read from the clock and `Math.random` at one point of its code. */
const sampleSchema = z.object({
  point: z.string(),
  nowMs: z.number(),
  dateMs: z.number(),
  random: z.array(z.number()),
});
type Sample = z.infer<typeof sampleSchema>;

function clockFixture() {
  /** Every execution of each point of the code, across turns and replays. */
  const samples: Sample[] = [];
  const sample = (point: string): Sample => {
    const s = {
      point,
      nowMs: Date.now(),
      dateMs: new Date().getTime(),
      random: [Math.random(), Math.random()],
    };
    samples.push(s);
    return s;
  };
  /** An activity in the same process: it must read the real clock. */
  const realClock = defineActivity({
    name: 'realClock',
    input: z.object({}),
    output: z.object({ nowMs: z.number(), dateMs: z.number() }),
    run: () => Promise.resolve({ nowMs: Date.now(), dateMs: new Date().getTime() }),
  });
  const go = defineSignal({ name: 'go', payload: z.object({}) });
  const clocked = defineWorkflow({
    name: 'clocked',
    input: z.object({}),
    output: z.object({
      samples: z.array(sampleSchema),
      activity: z.object({ nowMs: z.number(), dateMs: z.number() }),
    }),
    async run(_input, ctx) {
      const before = sample('before');
      const activity = await ctx.run(realClock, {});
      const afterActivity = sample('after activity');
      await ctx.sleep('1h');
      const afterSleep = sample('after sleep');
      await ctx.waitForSignal(go);
      return { samples: [before, afterActivity, afterSleep, sample('after signal')], activity };
    },
  });
  return { samples, realClock, go, clocked };
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`the workflow's clock and Math.random under replay, on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('gives workflow code the same Date.now(), new Date() and Math.random() on a replay by a new worker, and activities the real clock', async () => {
      const { samples, realClock, go, clocked } = clockFixture();
      const engine = await target.engine();
      // The database clock 10 days ahead of this process's: the workflow's clock follows the database's history.
      const DAY_MS = 86_400_000;
      await setClockOffset(engine, 10 * DAY_MS);
      const realBefore = Date.now();
      const w1 = engine.worker({ workflows: [clocked], activities: [realClock], workerId: 'first' });
      await w1.start();
      const handle = await engine.client.start(clocked, {});
      const blockedAt = (seq: number, kind: string) => async () =>
        (await stepsOf(engine, handle.runId))[seq]?.kind === kind;
      await checkOnEvents([w1], blockedAt(1, 'timer'), 'the run asleep');
      await advanceClock(engine, 3_600_000);
      await checkOnEvents([w1], blockedAt(2, 'signal'), 'the run waiting for its signal');
      await w1.stop();
      const firstRun = samples.filter((s) => s.point !== 'after signal');
      expect(firstRun.map((s) => s.point)).toEqual(['before', 'after activity', 'after sleep']);
      // A crashed worker's successor replays the run from its history, an hour of database time later.
      await advanceClock(engine, 3_600_000);
      const w2 = engine.worker({ workflows: [clocked], activities: [realClock], workerId: 'second' });
      await w2.start();
      await handle.signal(go, {});
      const output = await handle.result({ timeoutMs: 20_000 });
      await w2.stop();

      // The replay saw exactly what the first execution saw at each point.
      expect(output.samples.slice(0, 3)).toEqual(firstRun);
      for (const s of samples) expect(s).toEqual(samples.find((f) => f.point === s.point));
      // The values are the workflow's: the database's time, advancing with its history; random numbers that
      // advance too.
      const [before, afterActivity, afterSleep, afterSignal] = output.samples as [
        Sample,
        Sample,
        Sample,
        Sample,
      ];
      for (const s of output.samples) {
        expect(s.dateMs).toBe(s.nowMs);
        expect(Number.isInteger(s.nowMs)).toBe(true);
        for (const r of s.random) expect(r >= 0 && r < 1).toBe(true);
      }
      expect(before.nowMs).toBeGreaterThanOrEqual(realBefore + 10 * DAY_MS);
      expect(afterActivity.nowMs).toBeGreaterThanOrEqual(before.nowMs);
      expect(afterSleep.nowMs).toBeGreaterThanOrEqual(before.nowMs + 3_600_000);
      expect(afterSignal.nowMs).toBeGreaterThanOrEqual(afterSleep.nowMs + 3_600_000);
      expect(new Set(output.samples.flatMap((s) => s.random)).size).toBe(8);
      // The activity, in the same process, read the real clock.
      expect(output.activity.nowMs).toBeGreaterThanOrEqual(realBefore);
      expect(output.activity.nowMs).toBeLessThan(realBefore + DAY_MS);
      expect(output.activity.dateMs).toBeLessThan(realBefore + DAY_MS);
    });
  });
}
