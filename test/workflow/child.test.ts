/**
 * Child workflows (issue 13): `ctx.runChild` starts a run of its own, its parent recorded, in the commit of the
 * turn that calls it; the child's end completes the parent's step and wakes it; a cancel of the parent cascades.
 */
import { AsyncResource } from 'node:async_hooks';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, ChildWorkflowFailure, defineSignal, defineWorkflow } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { advanceClock, setFaultHook } from '@palisade/engine/testing';
import { nextEvent, useEngineTarget } from '../support/engine.js';
import { stepsOf } from './workflow-rows.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, type Definition, type ServingOptions } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';
import { oneStepWorkflow } from '../fixtures/one-step-workflow.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const release = defineSignal({ name: 'release', payload: z.null() });

const shout = pureActivity('shout', z.string(), z.string(), (s) => s.toUpperCase());

const child = defineWorkflow({
  name: 'child-shout',
  input: z.object({ text: z.string(), fail: z.boolean().default(false), wait: z.boolean().default(false) }),
  output: z.object({ shouted: z.string() }),
  async run({ text, fail, wait }, ctx) {
    if (wait) await ctx.waitForSignal(release);
    if (fail) throw ApplicationFailure.nonRetryable(`child refuses ${text}`, 'Refused');
    return { shouted: await ctx.run(shout, text) };
  },
});

const parent = defineWorkflow({
  name: 'child-parent',
  input: z.object({
    texts: z.array(z.string()),
    fail: z.boolean().default(false),
    wait: z.boolean().default(false),
    key: z.string().optional(),
    cancellation: z.enum(['cascade', 'abandon']).default('cascade'),
    awaitChildren: z.boolean().default(true),
  }),
  output: z.array(z.string()),
  async run(input, ctx) {
    const calls = input.texts.map((text) =>
      ctx.runChild(
        child,
        { text, fail: input.fail, wait: input.wait },
        { cancellation: input.cancellation, ...(input.key ? { key: input.key } : {}) },
      ),
    );
    if (!input.awaitChildren) {
      for (const call of calls) call.catch(() => undefined);
      await ctx.sleep(10); // a turn later: the children are running
      return ['left'];
    }
    const settled = await Promise.allSettled(calls);
    return settled.map((s) =>
      s.status === 'fulfilled'
        ? s.value.shouted
        : s.reason instanceof ChildWorkflowFailure
          ? `failed: ${s.reason.failure.message} (child ${s.reason.childRunId ?? '?'})`
          : `other: ${String(s.reason)}`,
    );
  },
});

let flakyBroken = true;
const flaky = noInputActivity('flaky-call', z.string(), () =>
  flakyBroken
    ? Promise.reject(ApplicationFailure.nonRetryable('the service is down', 'Down'))
    : Promise.resolve('up'),
);
const flakyChild = oneStepWorkflow('flaky-child', flaky);
const retryParent = noInputWorkflow('retry-parent', z.string(), (ctx) => ctx.runChild(flakyChild, {}));

const keyedRetryParent = defineWorkflow({
  name: 'keyed-retry-parent',
  input: z.object({ key: z.string() }),
  output: z.string(),
  run: ({ key }, ctx) => ctx.runChild(flakyChild, {}, { key }),
});
/** Starts a keyed child it leaves running (abandon) while a flaky call fails the parent, then awaits it. */
const abandoningParent = defineWorkflow({
  name: 'abandoning-parent',
  input: z.object({ key: z.string() }),
  output: z.object({ call: z.string(), child: z.string() }),
  async run({ key }, ctx) {
    const waiting = ctx.runChild(child, { text: 'kept', wait: true }, { key, cancellation: 'abandon' });
    waiting.catch(() => undefined);
    const call = await ctx.run(flaky, {});
    return { call, child: (await waiting).shouted };
  },
});

const failsFast = noInputActivity('fails-fast', z.string(), () =>
  Promise.reject(ApplicationFailure.nonRetryable('fast failure', 'Fast')),
);
/** Steps that fail while the code awaits another one, awaited only afterwards (in a try). */
const lateAwait = noInputWorkflow('late-await', z.array(z.string()), async (ctx) => {
  const failedActivity = ctx.run(failsFast, {});
  const failedChild = ctx.runChild(child, { text: 'bad', fail: true });
  const late = await ctx.runChild(child, { text: 'late', wait: true });
  const seen = [late.shouted];
  for (const step of [failedActivity, failedChild]) {
    try {
      await step;
    } catch (error) {
      seen.push((error as { code: string }).code);
    }
  }
  return seen;
});

async function childrenOf(engine: Engine, runId: string) {
  return (await engine.client.getHandle(runId).describe()).children;
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`child workflows on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    /** A started worker of `definitions`, polling every 50 ms, stopped when the test finishes. */
    const serve = async (engine: Engine, definitions: Definition[], options: ServingOptions = {}) => {
      const worker = await startWorker(engine, definitions, { pollIntervalMs: 50, ...options });
      onTestFinished(() => worker.stop());
      return worker;
    };
    const start = (engine: Engine, workflowCacheSize?: number) =>
      serve(engine, [parent, child, shout], workflowCacheSize === undefined ? {} : { workflowCacheSize });

    it('returns each child’s output, starts each once on kept instances and full replays, and links both ways', async () => {
      const engine = await target.engine();
      for (const cache of [undefined, 0]) {
        const worker = await start(engine, cache);
        const handle = await engine.client.start(parent, { texts: ['a', 'b', 'c'] });
        await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual(['A', 'B', 'C']);
        const description = await handle.describe();
        expect(description.children.map((c) => [c.name, c.status, c.seq])).toEqual([
          ['child-shout', 'completed', 0],
          ['child-shout', 'completed', 1],
          ['child-shout', 'completed', 2],
        ]);
        const steps = description.steps.filter((s) => s.kind === 'child');
        expect(steps.map((s) => s.status)).toEqual(['completed', 'completed', 'completed']);
        const kid = await engine.client.getHandle(description.children[0]!.id).describe();
        expect(kid.run.parentRunId).toBe(handle.runId);
        expect(kid.run.input).toEqual({ text: 'a', fail: false, wait: false });
        expect(description.events.filter((e) => e.type === 'child:started')).toHaveLength(3);
        await worker.stop();
      }
    });

    it('fails the parent’s await with ChildWorkflowFailure carrying the child’s failure', async () => {
      const engine = await target.engine();
      await start(engine);
      const handle = await engine.client.start(parent, { texts: ['x'], fail: true });
      const [line] = await handle.result({ timeoutMs: 20_000 });
      const [kid] = await childrenOf(engine, handle.runId);
      expect(kid?.status).toBe('failed');
      expect(line).toBe(`failed: child refuses x (child ${kid!.id})`);
    });

    it('starts a child once when the turn that starts it dies before its commit', async () => {
      const engine = await target.engine();
      let crashed = 0;
      let crash!: () => void;
      const died = new Promise<void>((resolve) => (crash = resolve));
      setFaultHook(
        'turn:before-commit',
        AsyncResource.bind((turn: { workflowName: string }) => {
          if (turn.workflowName === 'child-parent' && crashed++ === 0) {
            crash();
            return Promise.reject(new Error('the process died before its commit'));
          }
          return Promise.resolve();
        }),
      );
      onTestFinished(() => setFaultHook('turn:before-commit', undefined));
      await start(engine);
      const handle = await engine.client.start(parent, { texts: ['once'] });
      await died;
      // The dead turn's lease runs out (time travel): another claim runs the turn again and commits it.
      await advanceClock(engine, 10 * 60_000);
      await expect(handle.result({ timeoutMs: 30_000 })).resolves.toEqual(['ONCE']);
      expect(crashed).toBeGreaterThan(1);
      expect(await childrenOf(engine, handle.runId)).toHaveLength(1);
    });

    it('refuses a second child with a key another run has, naming that run', async () => {
      const engine = await target.engine();
      await start(engine);
      const key = `child-key-${driver}`;
      const first = await engine.client.start(parent, { texts: ['k'], key });
      await expect(first.result({ timeoutMs: 20_000 })).resolves.toEqual(['K']);
      const [owner] = await childrenOf(engine, first.runId);
      const second = await engine.client.start(parent, { texts: ['k'], key });
      const [line] = await second.result({ timeoutMs: 20_000 });
      expect(line).toMatch(new RegExp(`^failed: .*run ${owner!.id} .*key ${key} \\(child ${owner!.id}\\)$`));
      expect(await childrenOf(engine, second.runId)).toHaveLength(0);
    });

    it('starts a new child when a parent whose child failed is retried', async () => {
      const engine = await target.engine();
      await serve(engine, [retryParent, flakyChild, flaky]);
      flakyBroken = true;
      const handle = await engine.client.start(retryParent, {});
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
      flakyBroken = false;
      await engine.client.retry(handle.runId);
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toBe('up');
      const description = await handle.describe();
      expect(description.children.map((c) => c.status)).toEqual(['failed', 'completed']);
      expect(description.steps.map((s) => [s.kind, s.status, s.retiredAt !== null])).toEqual([
        ['child', 'failed', true],
        ['child', 'completed', false],
      ]);
    });

    it('retries a parent whose keyed child failed: the key goes to a new child run', async () => {
      const engine = await target.engine();
      await serve(engine, [keyedRetryParent, flakyChild, flaky]);
      flakyBroken = true;
      const key = `keyed-retry-${driver}`;
      const handle = await engine.client.start(keyedRetryParent, { key });
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
      const [failed] = await childrenOf(engine, handle.runId);
      flakyBroken = false;
      await engine.client.retry(handle.runId);
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toBe('up');
      const description = await handle.describe();
      expect(description.children.map((c) => [c.id === failed!.id, c.status])).toEqual([
        [true, 'failed'],
        [false, 'completed'],
      ]);
      // The key names the new run now; the failed one is kept in the parent's history.
      const keyed = await engine.client.start(flakyChild, {}, { key, onConflict: 'use-existing' });
      expect(keyed.runId).toBe(description.children[1]!.id);
      expect(description.steps.map((s) => [s.kind, s.status, s.retiredAt !== null])).toEqual([
        ['child', 'failed', true],
        ['child', 'completed', false],
      ]);
    });

    it('retries a parent whose keyed child it left running: the replay takes that child again', async () => {
      const engine = await target.engine();
      const worker = await serve(engine, [abandoningParent, child, flaky, shout]);
      flakyBroken = true;
      const handle = await engine.client.start(abandoningParent, { key: `kept-${driver}` });
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
      const [kept] = await childrenOf(engine, handle.runId);
      expect(kept?.status).toMatch(/pending|running/);
      flakyBroken = false;
      // The first turn after the retry starts the child again: the run it left running is its child once more.
      const replayed = nextEvent<{ runId: string }>(
        worker.events,
        'turn:committed',
        (e) => e.runId === handle.runId,
      );
      await engine.client.retry(handle.runId);
      await replayed;
      const steps = await stepsOf(engine, handle.runId);
      const childSteps = steps
        .filter((s) => s.kind === 'child')
        .sort((a, b) => a.created_at_ms - b.created_at_ms);
      expect(childSteps.map((s) => s.status)).toEqual(['cancelled', 'running']);
      await engine.client.signal(kept!.id, release, null);
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ call: 'up', child: 'KEPT' });
      const description = await handle.describe();
      expect(description.children.map((c) => [c.id, c.status])).toEqual([[kept!.id, 'completed']]);
    });

    it('hands the code a failure it awaits only after another step, without an unhandled rejection', async () => {
      const engine = await target.engine();
      const worker = await serve(engine, [lateAwait, child, failsFast, shout]);
      const handle = await engine.client.start(lateAwait, {});
      // Both failures delivered (the code was awaiting the third step then), before that step can end.
      await checkOnEvents(
        [worker],
        async () => {
          const steps = await stepsOf(engine, handle.runId);
          return steps.filter((s) => s.status === 'failed' && s.delivered_seq !== null).length === 2;
        },
        'the two failures delivered',
      );
      const waiting = (await childrenOf(engine, handle.runId)).find((c) => c.status !== 'failed');
      await engine.client.signal(waiting!.id, release, null);
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual([
        'LATE',
        'ACTIVITY_FAILURE',
        'CHILD_WORKFLOW_FAILURE',
      ]);
    });

    it('cascades a cancel of the parent to its waiting children, and leaves abandoned ones running', async () => {
      const engine = await target.engine();
      const worker = await start(engine);
      const cascading = await engine.client.start(parent, { texts: ['p', 'q'], wait: true });
      const abandoning = await engine.client.start(parent, {
        texts: ['r'],
        wait: true,
        cancellation: 'abandon',
      });
      for (const h of [cascading, abandoning]) {
        await checkOnEvents(
          [worker],
          async () => {
            const kids = await childrenOf(engine, h.runId);
            return kids.length > 0 && kids.every((k) => k.status === 'running');
          },
          'the children waiting',
        );
        await h.cancel('the user gave up');
      }
      // The parent's code sees its child steps cancelled (CancelledFailure at each await), and ends as it chooses.
      await expect(cascading.result({ timeoutMs: 20_000 })).resolves.toEqual([
        expect.stringMatching(/^other: CancelledFailure: \[CANCELLED\] .*child-shout#\d was cancelled/),
        expect.stringMatching(/^other: CancelledFailure: \[CANCELLED\] .*child-shout#\d was cancelled/),
      ]);
      await expect(abandoning.result({ timeoutMs: 20_000 })).resolves.toEqual([
        expect.stringMatching(/^other: .*CANCELLED/),
      ]);
      const cascaded = await childrenOf(engine, cascading.runId);
      for (const kid of cascaded) {
        await expect(engine.client.getHandle(kid.id).result({ timeoutMs: 20_000 })).rejects.toMatchObject({
          code: 'CANCELLED',
        });
      }
      const [abandoned] = await childrenOf(engine, abandoning.runId);
      const kid = engine.client.getHandle(abandoned!.id);
      expect((await kid.describe()).run.status).toBe('running');
      await kid.signal(release, null);
      await expect(kid.result({ timeoutMs: 20_000 })).resolves.toEqual({ shouted: 'R' });
    });

    it('cancels a cascading child still running when its parent ends without awaiting it', async () => {
      const engine = await target.engine();
      await start(engine);
      const handle = await engine.client.start(parent, { texts: ['z'], wait: true, awaitChildren: false });
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual(['left']);
      const [kid] = await childrenOf(engine, handle.runId);
      await expect(engine.client.getHandle(kid!.id).result({ timeoutMs: 20_000 })).rejects.toMatchObject({
        code: 'CANCELLED',
      });
      const steps = (await handle.describe()).steps.filter((s) => s.kind === 'child');
      expect(steps.map((s) => s.status)).toEqual(['cancelled']);
    });
  });
}
