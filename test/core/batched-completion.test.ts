/**
 * Completions and failures go in batches (issue 12): one statement fences every row on its own and answers per
 * row, so a stale row is rejected and recorded alone, a replayed row is reported as replayed, and a row whose
 * content the database refuses fails alone — never its neighbours. The worker's CompletionBatcher sends what
 * ended while a statement was in flight as the next statement of its kind, at most one row per step.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { LeaseLostError, defineActivity } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import {
  CompletionBatcher,
  claimSteps,
  completeStep,
  completeSteps,
  failStep,
  failSteps,
} from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOfStep, eventsOfRun, stepOfRun } from './engine-rows.js';

const job = defineActivity({
  name: 'job',
  input: z.object({ k: z.number() }),
  output: z.unknown(),
  leaseMs: '5m',
  run: () => Promise.resolve(null),
});

const failure = (message: string, nonRetryable = false) => ({ type: 'Error', message, nonRetryable });

/** `count` runs of `job`, claimed by this test as worker `w1` (no worker runs them). */
async function claimed(engine: Engine, count: number) {
  const handles = [];
  for (let k = 0; k < count; k++) handles.push(await engine.client.enqueue(job, { k }));
  const rows = await claimSteps(engine.database, engine.names, {
    workerId: 'w1',
    claimRequestId: randomUUID(),
    queues: ['default'],
    activityNames: ['job'],
    limit: count,
  });
  expect(rows).toHaveLength(count);
  const byRun = new Map(rows.map((r) => [r.run_id, r]));
  return handles.map((h) => {
    const r = byRun.get(h.runId);
    if (!r) throw new Error(`run ${h.runId} was not claimed`);
    return {
      handle: h,
      ref: {
        runId: r.run_id,
        stepId: r.id,
        stepLabel: `job#${r.seq}`,
        attempt: r.attempt,
        token: BigInt(r.token),
        nonce: r.nonce,
      },
    };
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`batched completions on ${driver}`, () => {
    const target = useEngineTarget(driver);

    /** A fresh engine, three runs of `job` claimed by this test, and a completion batcher on the engine. */
    async function threeClaimedAndABatcher() {
      const engine = await target.engine();
      const [a, b, c] = await claimed(engine, 3);
      if (!a || !b || !c) throw new Error('unreachable');
      return { engine, a, b, c, batcher: new CompletionBatcher(engine.database, engine.names) };
    }

    it('answers each row of one statement on its own: applied, replayed, rejected (recorded), applied', async () => {
      const engine = await target.engine();
      const [a, b, c, d] = await claimed(engine, 4);
      if (!a || !b || !c || !d) throw new Error('unreachable');
      // b's completion already committed (its reply was lost, say); c's run was cancelled under it.
      expect(await completeStep(engine.database, engine.names, { ...b.ref, output: 'b' })).toBe('applied');
      await engine.client.getHandle(c.handle.runId).cancel('operator');

      const { rows } = await completeSteps(engine.database, engine.names, [
        { ...a.ref, output: { by: 'a' } },
        { ...b.ref, output: 'b' },
        { ...c.ref, output: 'c' },
        { ...d.ref, output: ['d', 4] },
      ]);
      expect(rows.map((r) => [Number(r.ord), r.applied, r.replayed, r.reason])).toEqual([
        [1, true, false, null],
        [2, false, true, null],
        [3, false, false, 'cancelled'],
        [4, true, false, null],
      ]);

      // Each applied row carries its own output, to its (standalone) run, where a job's output is stored.
      expect((await stepOfRun(engine, a.handle.runId)).output).toEqual({ by: 'a' });
      expect((await stepOfRun(engine, d.handle.runId)).output).toEqual(['d', 4]);
      expect(await a.handle.result({ timeoutMs: 5_000 })).toEqual({ by: 'a' });
      expect(await d.handle.result({ timeoutMs: 5_000 })).toEqual(['d', 4]);
      expect(await b.handle.result({ timeoutMs: 5_000 })).toBe('b');
      // The stale row: its step stays cancelled, its attempt ends rejected_stale, one event says why.
      expect((await stepOfRun(engine, c.handle.runId)).status).toBe('cancelled');
      expect((await attemptsOfStep(engine, c.ref.stepId)).map((x) => x.outcome)).toEqual(['cancelled']);
      const rejected = await eventsOfRun(engine, c.handle.runId, 'attempt:stale-rejected');
      expect(rejected.map((e) => [e.data?.operation, e.data?.reason, e.data?.staleToken])).toEqual([
        ['complete', 'cancelled', c.ref.token.toString()],
      ]);
      // Nobody else recorded a rejection, and the replayed completion wrote nothing more.
      for (const x of [a, b, d]) {
        expect(await eventsOfRun(engine, x.handle.runId, 'attempt:stale-rejected')).toEqual([]);
        expect((await attemptsOfStep(engine, x.ref.stepId)).map((y) => y.outcome)).toEqual(['completed']);
        const terminal = (await eventsOfRun(engine, x.handle.runId)).filter((e) => e.terminal);
        expect(terminal.map((e) => e.type)).toEqual(['step:completed', 'run:completed']);
      }
    });

    it('the batcher gives each caller its own answer, fails only the row the database refuses, and sends one row per step per statement', async () => {
      const { engine, a, b, c, batcher } = await threeClaimedAndABatcher();
      // Queued in one turn of the event loop: one batch, except that b's second completion (the same attempt,
      // sent twice) goes in the next statement, and comes back replayed.
      const outcomes = await Promise.allSettled([
        batcher.complete({ ...a.ref, output: 'a' }),
        batcher.complete({ ...b.ref, output: 'b' }),
        batcher.complete({ ...b.ref, output: 'b' }),
        // jsonb cannot hold NUL: the database refuses the whole statement; retried row by row, only c fails.
        batcher.complete({ ...c.ref, output: 'c\u0000' }),
      ]);
      expect(outcomes.slice(0, 3)).toEqual([
        { status: 'fulfilled', value: 'applied' },
        { status: 'fulfilled', value: 'applied' },
        { status: 'fulfilled', value: 'replayed' },
      ]);
      expect(outcomes[3]?.status).toBe('rejected');
      expect((outcomes[3] as PromiseRejectedResult).reason).not.toBeInstanceOf(LeaseLostError);
      expect(await a.handle.result({ timeoutMs: 5_000 })).toBe('a');
      expect(await b.handle.result({ timeoutMs: 5_000 })).toBe('b');
      expect((await stepOfRun(engine, c.handle.runId)).status).toBe('running');
    });
    it('records a batch of failures in one statement, each row on its own: retried, ended, replayed, rejected', async () => {
      const engine = await target.engine();
      const [a, b, c, d] = await claimed(engine, 4);
      if (!a || !b || !c || !d) throw new Error('unreachable');
      // c's failure already committed (its reply was lost, say); d's run was cancelled under it.
      expect(
        await failStep(engine.database, engine.names, { ...c.ref, error: failure('c'), retry: false }),
      ).toBe('applied');
      await engine.client.getHandle(d.handle.runId).cancel('operator');

      const rows = await failSteps(engine.database, engine.names, [
        { ...a.ref, error: failure('a'), retry: true },
        { ...b.ref, error: failure('b', true), retry: false, outcome: 'timed_out' },
        { ...c.ref, error: failure('c'), retry: false },
        { ...d.ref, error: failure('d'), retry: true },
      ]);
      expect(rows.map((r) => [Number(r.ord), r.applied, r.replayed, r.reason])).toEqual([
        [1, true, false, null],
        [2, true, false, null],
        [3, false, true, null],
        [4, false, false, 'cancelled'],
      ]);
      // a goes back to scheduled with its own error and a persisted retry time; its attempt ended failed.
      const stepA = await stepOfRun(engine, a.handle.runId);
      expect([stepA.status, stepA.error]).toEqual(['scheduled', failure('a')]);
      expect((await attemptsOfStep(engine, a.ref.stepId)).map((x) => x.outcome)).toEqual(['failed']);
      const retried = await eventsOfRun(engine, a.handle.runId, 'attempt:failed');
      expect(retried.map((e) => [e.data?.error, typeof e.data?.retryAt])).toEqual([[failure('a'), 'string']]);
      // b ends, and its standalone run with it, with b's error and b's attempt outcome.
      expect((await stepOfRun(engine, b.handle.runId)).status).toBe('failed');
      expect((await attemptsOfStep(engine, b.ref.stepId)).map((x) => x.outcome)).toEqual(['timed_out']);
      await expect(b.handle.result({ timeoutMs: 5_000 })).rejects.toMatchObject({
        failure: { message: 'b' },
      });
      // c's replay wrote nothing more; d's stale failure is recorded on its own.
      expect(
        (await eventsOfRun(engine, c.handle.runId)).filter((e) => e.terminal).map((e) => e.type),
      ).toEqual(['step:failed', 'run:failed']);
      expect((await stepOfRun(engine, d.handle.runId)).status).toBe('cancelled');
      const rejected = await eventsOfRun(engine, d.handle.runId, 'attempt:stale-rejected');
      expect(rejected.map((e) => [e.data?.operation, e.data?.reason])).toEqual([['fail', 'cancelled']]);
      for (const x of [a, b, c]) {
        expect(await eventsOfRun(engine, x.handle.runId, 'attempt:stale-rejected')).toEqual([]);
      }
    });

    it('the batcher sends failures in statements of their own, and fails only the failure the database refuses', async () => {
      const { engine, a, b, c, batcher } = await threeClaimedAndABatcher();
      const outcomes = await Promise.allSettled([
        batcher.fail({ ...a.ref, error: failure('a', true), retry: false }),
        batcher.complete({ ...b.ref, output: 'b' }),
        // jsonb cannot hold NUL: the database refuses the whole statement; retried row by row, only c fails.
        batcher.fail({ ...c.ref, error: failure('c\u0000'), retry: true }),
        // The same attempt's failure sent again: it comes back replayed.
        batcher.fail({ ...a.ref, error: failure('a', true), retry: false }),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
      expect(outcomes.map((o) => (o.status === 'fulfilled' ? o.value : null))).toEqual([
        'applied',
        'applied',
        null,
        'replayed',
      ]);
      expect((outcomes[2] as PromiseRejectedResult).reason).not.toBeInstanceOf(LeaseLostError);
      await expect(a.handle.result({ timeoutMs: 5_000 })).rejects.toMatchObject({
        failure: { message: 'a' },
      });
      expect(await b.handle.result({ timeoutMs: 5_000 })).toBe('b');
      expect((await stepOfRun(engine, c.handle.runId)).status).toBe('running');
    });
  });
}
