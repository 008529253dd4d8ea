/**
 * What a worker tells its operator (issue 26, tried as a new user would): due work for an activity or workflow it
 * does not register is named at once, and every failure it logs carries its reason.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, defineActivity, defineWorkflow } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { recordingLogger, workerEvent } from './helpers.js';

const noInput = z.object({});
const charge = defineActivity({
  name: 'charge',
  input: noInput,
  output: z.string(),
  run: () => Promise.resolve('charged'),
});
const refund = defineActivity({
  name: 'refund',
  input: noInput,
  output: z.string(),
  run: () => Promise.resolve('refunded'),
});
const settle = defineWorkflow({
  name: 'settle',
  input: noInput,
  output: z.string(),
  run: (_input, ctx) => ctx.run(charge, {}),
});
const audit = defineWorkflow({
  name: 'audit',
  input: noInput,
  output: z.string(),
  run: () => Promise.resolve('ok'),
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`worker diagnostics on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('warns once, naming the activity and the queue, when a run needs an activity the worker does not register', async () => {
      const { logger, records } = recordingLogger();
      const engine = await target.engine({ logger });
      // The worker runs settle but lacks charge, which settle's run needs.
      const worker = engine.worker({
        workflows: [settle],
        activities: [refund],
        pollIntervalMs: 50,
        workerId: 'lacking',
      });
      const warned = workerEvent(worker, 'worker:unserved-work');
      await worker.start();
      const handle = await engine.client.start(settle, {});
      expect(await warned).toEqual({
        workerId: 'lacking',
        kind: 'activity',
        name: 'charge',
        queue: 'default',
      });
      const warning = records.find((r) => r.msg === 'worker:unserved-work');
      expect(warning).toMatchObject({ level: 'warn', kind: 'activity', name: 'charge', queue: 'default' });
      expect(warning?.message).toContain('activity charge has work due on queue default');
      expect(warning?.message).toContain('worker lacking does not register it (its activities: refund)');
      // A worker that registers charge ends the run.
      const full = engine.worker({ workflows: [settle], activities: [charge], workerId: 'full' });
      await full.start();
      expect(await handle.result({ timeoutMs: 20_000 })).toBe('charged');
      await full.stop();
      // Once, not at every poll (unserved-work-monitor.test.ts checks the repeat interval).
      expect(records.filter((r) => r.msg === 'worker:unserved-work')).toHaveLength(1);
      await worker.stop();
    });

    it('warns naming a workflow the worker does not register whose run is due on its queue', async () => {
      const { logger, records } = recordingLogger();
      const engine = await target.engine({ logger });
      const worker = engine.worker({ workflows: [settle], activities: [charge], workerId: 'no-audit' });
      await engine.client.start(audit, {});
      const warned = workerEvent(worker, 'worker:unserved-work');
      await worker.start();
      expect(await warned).toEqual({
        workerId: 'no-audit',
        kind: 'workflow',
        name: 'audit',
        queue: 'default',
      });
      expect(records.find((r) => r.msg === 'worker:unserved-work')?.message).toContain(
        'workflow audit has work due on queue default, and worker no-audit does not register it (its workflows: settle)',
      );
      await worker.stop();
    });

    it('logs every failed attempt and failed run with its reason: type, code and message', async () => {
      const { logger, records } = recordingLogger();
      const engine = await target.engine({ logger });
      const decline = defineActivity({
        name: 'decline',
        input: noInput,
        output: z.string(),
        retry: { maximumAttempts: 1 },
        run: () =>
          Promise.reject(
            ApplicationFailure.nonRetryable('card declined: insufficient funds', 'CardDeclined'),
          ),
      });
      const pay = defineWorkflow({
        name: 'pay',
        input: noInput,
        output: z.string(),
        run: (_input, ctx) => ctx.run(decline, {}),
      });
      const worker = engine.worker({ workflows: [pay], activities: [decline] });
      await worker.start();
      const handle = await engine.client.start(pay, {});
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toThrow(/card declined/);
      await worker.stop();
      const attemptFailed = records.find((r) => r.msg === 'attempt:failed');
      expect(attemptFailed).toMatchObject({
        level: 'warn',
        runId: handle.runId,
        step: 'decline#0',
        retry: false,
        error: { type: 'CardDeclined', message: 'card declined: insufficient funds' },
      });
      const runFailed = records.find((r) => r.msg === 'run:failed');
      expect(runFailed).toMatchObject({ level: 'warn', runId: handle.runId, workflow: 'pay' });
      expect((runFailed?.error as { message: string }).message).toContain(
        'card declined: insufficient funds',
      );
    });
  });
}
