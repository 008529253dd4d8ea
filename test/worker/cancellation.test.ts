import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { AttemptAbortedError, CancelledFailure, defineActivity } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { aborted, attemptsOf, eventsOf, gate, settle, stepOf, workerEvent, type Gate } from './helpers.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const probe = emptyActivity('probe');

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`cancellation on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('ends a scheduled run cancelled at once, and no worker claims it afterwards', async () => {
      let runs = 0;
      const job = emptyActivity('job', {
        run() {
          runs++;
          return Promise.resolve({});
        },
      });
      const engine = await target.engine();
      const handle = await engine.client.enqueue(job, {});

      await expect(handle.cancel('not needed any more')).resolves.toBe('cancelled');

      const outcome = await settle(handle.result({ timeoutMs: 1_000 }));
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(CancelledFailure);
      expect(error).toMatchObject({ code: 'CANCELLED', reason: 'not needed any more' });
      expect(await stepOf(engine, handle.runId)).toMatchObject({
        status: 'cancelled',
        attempt: 0,
        epoch: 0,
        next_run_at_ms: null,
      });
      const events = await eventsOf(engine, handle.runId);
      expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual([
        'step:cancelled',
        'run:cancelled',
      ]);

      // A claim pass that runs later (proven by the probe) leaves the cancelled step alone.
      const worker = engine.worker({ activities: [job, probe], pollIntervalMs: 20 });
      await worker.start();
      await engine.client.enqueue(probe, {}).then((h) => h.result({ timeoutMs: 10_000 }));
      expect(runs).toBe(0);
      expect(await attemptsOf(engine, handle.runId)).toEqual([]);
      expect((await handle.describe()).run.status).toBe('cancelled');
      // Cancelling again is a no-op that reports the state.
      await expect(handle.cancel()).resolves.toBe('cancelled');
    });

    it('fires the signal of a running attempt with reason cancelled at its next heartbeat and ends step and run cancelled', async () => {
      const late: Gate<{ reason: unknown; heartbeat: unknown; transaction: unknown }> = gate();
      const job = defineActivity({
        name: 'job',
        input: z.object({}),
        output: z.object({ finished: z.boolean() }),
        async run(_input, ctx) {
          const reason = await aborted(ctx.signal);
          // A zombie that carries on: its calls are refused and its result is never recorded.
          const heartbeat = await settle(ctx.heartbeat({ progress: 99 }));
          const transaction = await settle(ctx.fencedTransaction(() => Promise.resolve('write')));
          late.open({ reason, heartbeat, transaction });
          return { finished: true };
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [job], pollIntervalMs: 20, heartbeatIntervalMs: 100 });
      await worker.start();
      const started = workerEvent(worker, 'attempt:started');
      const handle = await engine.client.enqueue(job, {});
      const { attempt: ref } = await started;
      const abortedEvent = workerEvent(worker, 'attempt:aborted');

      // The cancel ends step and run at once; the owner learns at its next heartbeat (DESIGN.md §4).
      await expect(handle.cancel('user pressed stop')).resolves.toBe('cancelled');
      const outcome = await settle(handle.result({ timeoutMs: 10_000 }));

      expect((await abortedEvent).reason).toBe('cancelled');
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(CancelledFailure);
      expect(error).toMatchObject({ code: 'CANCELLED', reason: 'user pressed stop', runId: handle.runId });

      const calls = await late.promise;
      expect(calls.reason).toBeInstanceOf(AttemptAbortedError);
      expect(calls.reason).toMatchObject({ code: 'ATTEMPT_ABORTED', reason: 'cancelled' });
      // Refused by the database, which said why; every later call repeats that refusal without a round trip.
      expect(calls.heartbeat).toMatchObject({
        ok: false,
        error: { code: 'LEASE_LOST', reason: 'cancelled' },
      });
      expect(calls.transaction).toMatchObject({
        ok: false,
        error: { code: 'LEASE_LOST', reason: 'cancelled' },
      });

      // Exactly one outcome, recorded by the cancel: the owner's later completion never lands.
      const step = await stepOf(engine, handle.runId);
      expect(step).toMatchObject({
        status: 'cancelled',
        attempt: 1,
        token: ref.token.toString(),
        output: null,
        error: { type: 'CancelledFailure' },
      });
      expect(step.heartbeat_details).toBeNull();
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual(['cancelled']);
      const events = await eventsOf(engine, handle.runId);
      expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual([
        'step:cancelled',
        'run:cancelled',
      ]);
      expect(events.map((e) => e.type)).not.toContain('step:completed');
      const run = (await handle.describe()).run;
      expect(run).toMatchObject({ status: 'cancelled', output: null, cancelReason: 'user pressed stop' });
    });
  });
}
