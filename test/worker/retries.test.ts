import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, RunFailedError, defineActivity, type ActivityInfo } from '@palisade/sdk';
import type { Engine, Worker } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, eventsOf, settle, stepOf, workerEvent } from './helpers.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

/** Backoff long enough that only time travel can make a retry due within a test. */
const MINUTE_BACKOFF = { initialIntervalMs: 60_000, backoffCoefficient: 2, jitter: 0 } as const;

/** A probe run that completes proves the worker made a claim pass after the test set the DB clock. */
const probe = defineActivity({
  name: 'probe',
  input: z.object({}),
  output: z.object({ ok: z.literal(true) }),
  run() {
    return Promise.resolve({ ok: true as const });
  },
});

/** Every failed attempt that will be retried moves the DB clock past its backoff, so the retry is due now. */
function skipBackoffs(engine: Engine, worker: Worker, ms = 10 * 60_000): void {
  worker.events.on('attempt:failed', ({ retry }) => {
    if (retry) void advanceClock(engine, ms);
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`activity retries on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('completes on attempt 3 after two failures, with failed, failed, completed attempts and rising tokens', async () => {
      const seen: ActivityInfo[] = [];
      const flaky = defineActivity({
        name: 'flaky',
        input: z.object({ n: z.number() }),
        output: z.object({ n: z.number(), attempt: z.number() }),
        retry: { ...MINUTE_BACKOFF, maximumAttempts: 5 },
        run(input, ctx) {
          seen.push(ctx.info);
          if (ctx.info.attempt < 3) throw new Error(`upstream down (attempt ${ctx.info.attempt})`);
          return Promise.resolve({ n: input.n, attempt: ctx.info.attempt });
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [flaky], pollIntervalMs: 20 });
      skipBackoffs(engine, worker);
      await worker.start();

      const handle = await engine.client.enqueue(flaky, { n: 7 });
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ n: 7, attempt: 3 });

      expect(seen.map((i) => [i.attempt, i.epoch])).toEqual([
        [1, 1],
        [2, 2],
        [3, 3],
      ]);
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
        [1, 1, 'failed'],
        [2, 2, 'failed'],
        [3, 3, 'completed'],
      ]);
      expect(attempts.map((a) => a.error?.message ?? null)).toEqual([
        'upstream down (attempt 1)',
        'upstream down (attempt 2)',
        null,
      ]);
      const tokens = attempts.map((a) => BigInt(a.token));
      expect(tokens[0]! < tokens[1]! && tokens[1]! < tokens[2]!).toBe(true);
      expect(seen.map((i) => i.fencing.token)).toEqual(tokens);

      const step = await stepOf(engine, handle.runId);
      expect(step).toMatchObject({ status: 'completed', attempt: 3, epoch: 3, token: attempts[2]!.token });
      expect(step.output).toEqual({ n: 7, attempt: 3 });
      const events = await eventsOf(engine, handle.runId);
      expect(events.map((e) => [e.type, e.attempt])).toEqual([
        ['step:scheduled', null],
        ['attempt:claimed', 1],
        ['attempt:failed', 1],
        ['attempt:claimed', 2],
        ['attempt:failed', 2],
        ['attempt:claimed', 3],
        ['step:completed', 3],
        ['run:completed', null],
      ]);
      expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual([
        'step:completed',
        'run:completed',
      ]);
    });

    it('stores the backoff in steps.next_run_at and does not claim the retry before it by DB time', async () => {
      const flaky = defineActivity({
        name: 'flaky',
        input: z.object({}),
        output: z.object({ attempt: z.number() }),
        retry: { ...MINUTE_BACKOFF, maximumAttempts: 3 },
        run(_input, ctx) {
          if (ctx.info.attempt === 1) throw new Error('first try fails');
          return Promise.resolve({ attempt: ctx.info.attempt });
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [flaky, probe], pollIntervalMs: 20 });
      await worker.start();

      const failed = workerEvent(worker, 'attempt:failed');
      const handle = await engine.client.enqueue(flaky, {});
      expect((await failed).retry).toBe(true);
      const [first] = await attemptsOf(engine, handle.runId);
      const step = await stepOf(engine, handle.runId);
      expect(step).toMatchObject({ status: 'scheduled', attempt: 1, epoch: 1 });
      // Persisted: the first retry waits initialIntervalMs (no jitter) from the failure, by the DB clock.
      const backoffMs = step.next_run_at_ms! - first!.ended_at_ms!;
      expect(Math.abs(backoffMs - 60_000)).toBeLessThan(100);

      // 5 s before it is due, a claim pass (proven by the probe being claimed and run) leaves it alone.
      await advanceClock(engine, 55_000);
      await engine.client.enqueue(probe, {}).then((h) => h.result({ timeoutMs: 10_000 }));
      expect(await stepOf(engine, handle.runId)).toMatchObject({ status: 'scheduled', attempt: 1, epoch: 1 });

      await advanceClock(engine, 6_000);
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({ attempt: 2 });
      const second = (await attemptsOf(engine, handle.runId))[1]!;
      expect(second).toMatchObject({ attempt: 2, outcome: 'completed' });
      expect(second.claimed_at_ms).toBeGreaterThanOrEqual(step.next_run_at_ms!);
    });

    it('keeps a retry on its stored schedule across a worker restart', async () => {
      const flaky = defineActivity({
        name: 'flaky',
        input: z.object({}),
        output: z.object({ attempt: z.number(), workerId: z.string() }),
        retry: { ...MINUTE_BACKOFF, maximumAttempts: 3 },
        run(_input, ctx) {
          if (ctx.info.attempt === 1) throw new Error('first try fails');
          return Promise.resolve({ attempt: ctx.info.attempt, workerId: ctx.info.workerId });
        },
      });
      const engine = await target.engine();
      const first = engine.worker({ activities: [flaky], pollIntervalMs: 20, workerId: 'before-restart' });
      await first.start();
      const failed = workerEvent(first, 'attempt:failed');
      const handle = await engine.client.enqueue(flaky, {});
      await failed;
      await first.stop();
      const { next_run_at_ms: dueAtMs } = await stepOf(engine, handle.runId);

      const second = engine.worker({
        activities: [flaky, probe],
        pollIntervalMs: 20,
        workerId: 'after-restart',
      });
      await second.start();
      await advanceClock(engine, 55_000);
      await engine.client.enqueue(probe, {}).then((h) => h.result({ timeoutMs: 10_000 }));
      expect(await stepOf(engine, handle.runId)).toMatchObject({
        status: 'scheduled',
        attempt: 1,
        next_run_at_ms: dueAtMs,
      });

      await advanceClock(engine, 6_000);
      await expect(handle.result({ timeoutMs: 10_000 })).resolves.toEqual({
        attempt: 2,
        workerId: 'after-restart',
      });
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.map((a) => [a.attempt, a.worker_id, a.outcome])).toEqual([
        [1, 'before-restart', 'failed'],
        [2, 'after-restart', 'completed'],
      ]);
      expect(attempts[1]!.claimed_at_ms).toBeGreaterThanOrEqual(dueAtMs!);
    });

    it('fails the run at once on a non-retryable ApplicationFailure, keeping its type and details', async () => {
      let runs = 0;
      const charge = emptyActivity('charge', {
        retry: { maximumAttempts: 5, initialIntervalMs: 10 },
        run() {
          runs++;
          throw ApplicationFailure.nonRetryable('card declined', 'CardDeclined', {
            reason: 'insufficient_funds',
          });
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [charge], pollIntervalMs: 20 });
      await worker.start();

      const handle = await engine.client.enqueue(charge, {});
      const outcome = await settle(handle.result({ timeoutMs: 10_000 }));
      expect(outcome.ok).toBe(false);
      const error = (outcome as { error: RunFailedError }).error;
      expect(error).toBeInstanceOf(RunFailedError);
      expect(error.code).toBe('RUN_FAILED');
      expect(error.failure).toMatchObject({
        type: 'CardDeclined',
        message: 'card declined',
        nonRetryable: true,
        details: { reason: 'insufficient_funds' },
      });
      expect(runs).toBe(1);
      expect(await stepOf(engine, handle.runId)).toMatchObject({ status: 'failed', attempt: 1, epoch: 1 });
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual(['failed']);
      const events = await eventsOf(engine, handle.runId);
      expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual(['step:failed', 'run:failed']);
      expect(events.some((e) => e.type === 'attempt:failed')).toBe(false);
    });

    it('fails the run at once when the error type is listed in nonRetryableErrorTypes', async () => {
      class PaymentDeclined extends Error {
        override name = 'PaymentDeclined';
      }
      let runs = 0;
      const charge = emptyActivity('charge', {
        retry: { maximumAttempts: 5, initialIntervalMs: 10, nonRetryableErrorTypes: ['PaymentDeclined'] },
        run() {
          runs++;
          throw new PaymentDeclined('do not retry me');
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [charge], pollIntervalMs: 20 });
      await worker.start();

      const handle = await engine.client.enqueue(charge, {});
      const outcome = await settle(handle.result({ timeoutMs: 10_000 }));
      expect((outcome as { error: RunFailedError }).error).toMatchObject({
        code: 'RUN_FAILED',
        failure: { type: 'PaymentDeclined', message: 'do not retry me' },
      });
      expect(runs).toBe(1);
      expect(await stepOf(engine, handle.runId)).toMatchObject({ status: 'failed', attempt: 1 });
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual(['failed']);
    });

    it('fails the run with RunFailedError once maximumAttempts are used up', async () => {
      let runs = 0;
      const down = emptyActivity('down', {
        retry: { ...MINUTE_BACKOFF, maximumAttempts: 3 },
        run(_input, ctx) {
          runs++;
          throw new Error(`still down on attempt ${ctx.info.attempt}`);
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [down], pollIntervalMs: 20 });
      skipBackoffs(engine, worker);
      const decisions: boolean[] = [];
      worker.events.on('attempt:failed', ({ retry }) => decisions.push(retry));
      await worker.start();
      // result() may wake (on the run's NOTIFY) before the worker has announced its own write: wait for both.
      const lastFailure = workerEvent(worker, 'attempt:failed', ({ retry }) => !retry);

      const handle = await engine.client.enqueue(down, {});
      const outcome = await settle(handle.result({ timeoutMs: 10_000 }));
      await lastFailure;
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(RunFailedError);
      expect(error).toMatchObject({
        code: 'RUN_FAILED',
        runId: handle.runId,
        failure: { type: 'Error', message: 'still down on attempt 3' },
      });
      expect(runs).toBe(3);
      expect(decisions).toEqual([true, true, false]);
      expect(await stepOf(engine, handle.runId)).toMatchObject({ status: 'failed', attempt: 3, epoch: 3 });
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual([
        'failed',
        'failed',
        'failed',
      ]);
      expect((await handle.describe()).run).toMatchObject({
        status: 'failed',
        error: { message: 'still down on attempt 3' },
      });
    });
  });
}
