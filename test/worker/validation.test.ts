import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { InvalidOptionsError, RunFailedError, ValidationError, defineActivity } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, eventsOf, settle, stepOf } from './helpers.js';

const invoice = z.object({
  invoiceId: z.string(),
  lines: z.array(z.object({ sku: z.string(), amountCents: z.number().int().positive() })),
});

/** An activity that takes an invoice and does nothing with it: what the validation tests enqueue. */
const bill = defineActivity({
  name: 'bill',
  input: invoice,
  output: z.object({}),
  run() {
    return Promise.resolve({});
  },
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`input and output validation on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('refuses to enqueue bad input with a ValidationError naming the activity and field path, storing nothing', async () => {
      const engine = await target.engine();
      const bad = {
        invoiceId: 'inv-1',
        lines: [
          { sku: 'a', amountCents: 100 },
          { sku: 'b', amountCents: -5 },
        ],
      };

      const outcome = await settle(engine.client.enqueue(bill, bad));
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(ValidationError);
      const validation = error as ValidationError;
      expect(validation.code).toBe('VALIDATION_FAILED');
      expect(validation.issues.map((i) => i.path)).toEqual(['lines.1.amountCents']);
      expect(validation.message).toMatch(/^\[VALIDATION_FAILED\] input of activity bill is invalid: /);
      expect(validation.message).toContain('lines.1.amountCents');
      expect(await engine.client.list()).toEqual([]);
    });

    it('refuses a per-run lease shorter than the activity lease its workers heartbeat for, storing nothing', async () => {
      const bill = defineActivity({
        name: 'bill',
        input: invoice,
        output: z.object({}),
        leaseMs: '30s',
        run() {
          return Promise.resolve({});
        },
      });
      const engine = await target.engine();
      const outcome = await settle(
        engine.client.enqueue(bill, { invoiceId: 'inv-3', lines: [] }, { leaseMs: '3s' }),
      );
      const error = (outcome as { error: unknown }).error as InvalidOptionsError;
      expect(error).toBeInstanceOf(InvalidOptionsError);
      expect(error.issues).toEqual([
        { path: 'leaseMs', message: expect.stringContaining('≥ the activity') as unknown },
      ]);
      expect(await engine.client.list()).toEqual([]);
      const longer = await engine.client.enqueue(bill, { invoiceId: 'inv-4', lines: [] }, { leaseMs: '60s' });
      const [step] = await engine.database.rows<{ lease_ms: number }>(
        sql`SELECT p.lease_ms FROM ${engine.names.steps} s JOIN ${engine.names.policies} p ON p.id = s.policy_id
             WHERE s.run_id = ${longer.runId}::uuid`,
      );
      expect(step?.lease_ms).toBe(60_000);
    });

    it('refuses bad enqueue options with an InvalidOptionsError naming the option', async () => {
      const engine = await target.engine();
      const outcome = await settle(
        engine.client.enqueue(bill, { invoiceId: 'inv-2', lines: [] }, { priority: 1.5, queue: 'no spaces' }),
      );
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(InvalidOptionsError);
      expect((error as InvalidOptionsError).issues.map((i) => i.path).sort()).toEqual(['priority', 'queue']);
      expect((error as Error).message).toContain('enqueue options of bill');
      expect(await engine.client.list()).toEqual([]);
    });

    it('fails the step without retrying when the activity returns output its schema refuses', async () => {
      let runs = 0;
      const charge = defineActivity({
        name: 'charge',
        input: z.object({}),
        output: z.object({ receipt: z.object({ chargeId: z.string() }) }),
        retry: { maximumAttempts: 5, initialIntervalMs: 10 },
        run() {
          runs++;
          return Promise.resolve({ receipt: { chargeId: 42 } } as unknown as {
            receipt: { chargeId: string };
          });
        },
      });
      const engine = await target.engine();
      const worker = engine.worker({ activities: [charge], pollIntervalMs: 20 });
      await worker.start();
      const handle = await engine.client.enqueue(charge, {});

      const outcome = await settle(handle.result({ timeoutMs: 10_000 }));
      const error = (outcome as { error: unknown }).error;
      expect(error).toBeInstanceOf(RunFailedError);
      const { failure } = error as RunFailedError;
      expect(failure).toMatchObject({
        type: 'ValidationError',
        code: 'VALIDATION_FAILED',
        nonRetryable: true,
      });
      expect(failure.message).toContain('output of activity charge is invalid');
      expect(failure.message).toContain('receipt.chargeId');
      expect(runs).toBe(1);
      expect(await stepOf(engine, handle.runId)).toMatchObject({
        status: 'failed',
        attempt: 1,
        output: null,
        error: { type: 'ValidationError' },
      });
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual(['failed']);
      const events = await eventsOf(engine, handle.runId);
      expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual(['step:failed', 'run:failed']);
    });
  });
}
