/**
 * Tokens only grow (DESIGN.md §4 invariant 6; research I2): manual retries, cancellations, releases and expiry
 * maintenance never reuse or lower a step's fencing token or epoch, and the database refuses a manual UPDATE
 * that would (trigger `guard_monotonic_tokens`, SQLSTATE PL001).
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { ApplicationFailure, CancelledFailure, RunFailedError } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOfStep, eventsOfRun, sqlState, stepOfRun, stepRowJson } from './engine-rows.js';
import { rejectionOf } from '../support/rejections.js';
import { holdActivity } from './held-activity.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const LEASE_MS = 5 * 60_000;

const alwaysFails = emptyActivity('always-fails', {
  leaseMs: LEASE_MS,
  retry: { maximumAttempts: 1 },
  run() {
    return Promise.reject(new ApplicationFailure('refused on purpose', { type: 'Refused' }));
  },
});

function tokensOf(rows: readonly { token: string }[]): bigint[] {
  return rows.map((r) => BigInt(r.token));
}

function strictlyIncreasing(values: readonly bigint[]): boolean {
  return values.every((v, i) => i === 0 || v > (values[i - 1] as bigint));
}

async function resultError(engine: Engine, runId: string): Promise<unknown> {
  return rejectionOf(engine.client.getHandle(runId).result({ timeoutMs: 10_000, pollIntervalMs: 100 }));
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`fencing tokens and epochs on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('keeps tokens and epochs growing across manual retries of a failed run', async () => {
      const engine = await target.engine();
      let worker = engine.worker({ activities: [alwaysFails], pollIntervalMs: 50 });
      await worker.start();
      const run = await engine.client.enqueue(alwaysFails, {});
      expect(await resultError(engine, run.runId)).toBeInstanceOf(RunFailedError);

      for (let retry = 1; retry <= 3; retry++) {
        const failed = await stepOfRun(engine, run.runId);
        // No worker while the reset is read, or it may already have claimed the step again.
        await worker.stop({ graceMs: 0 });
        await engine.client.retry(run.runId);
        const reset = await stepOfRun(engine, run.runId);
        worker = engine.worker({ activities: [alwaysFails], pollIntervalMs: 50 });
        await worker.start();
        // A retry resets the retry budget, never the token or the epoch.
        expect([reset.status, reset.attempt, reset.epoch, reset.token]).toEqual([
          'scheduled',
          0,
          failed.epoch,
          failed.token,
        ]);
        expect(await resultError(engine, run.runId)).toBeInstanceOf(RunFailedError);
        const again = await stepOfRun(engine, run.runId);
        expect([again.attempt, again.epoch, BigInt(again.token!) > BigInt(failed.token!)]).toEqual([
          1,
          failed.epoch + 1,
          true,
        ]);
      }

      const step = await stepOfRun(engine, run.runId);
      const attempts = await attemptsOfStep(engine, step.id);
      expect(attempts.map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
        [1, 1, 'failed'],
        [1, 2, 'failed'],
        [1, 3, 'failed'],
        [1, 4, 'failed'],
      ]);
      expect(strictlyIncreasing(tokensOf(attempts))).toBe(true);
      expect(await eventsOfRun(engine, run.runId, 'run:retry-requested')).toHaveLength(3);
      // A new run's first token is above every token issued before it (one global sequence).
      const next = await engine.client.enqueue(alwaysFails, {});
      await resultError(engine, next.runId);
      const first = await stepOfRun(engine, next.runId);
      expect(BigInt(first.token!)).toBeGreaterThan(tokensOf(attempts).at(-1) as bigint);
    });

    it('keeps tokens and epochs growing across a cancel and a retry', async () => {
      const engine = await target.engine();
      const held = holdActivity('held', { leaseMs: LEASE_MS });
      const worker = engine.worker({ activities: [held.activity], pollIntervalMs: 50 });
      await worker.start();
      const run = await engine.client.enqueue(held.activity, {});
      const first = await held.next();
      expect(await run.cancel('operator said so')).toBe('cancelled');
      // The cancel ended the step under its owner; the owner's next heartbeat is refused, saying why, and once it
      // has been told, the retry below need not wait for its lease to run out.
      await expect(first.ctx.heartbeat()).rejects.toMatchObject({ code: 'LEASE_LOST', reason: 'cancelled' });
      expect(first.ctx.signal.aborted).toBe(true);
      expect(await resultError(engine, run.runId)).toBeInstanceOf(CancelledFailure);
      const cancelled = await stepOfRun(engine, run.runId);
      expect([cancelled.status, cancelled.epoch, cancelled.token]).toEqual([
        'cancelled',
        1,
        first.token.toString(),
      ]);

      await engine.client.retry(run.runId);
      const second = await held.next();
      expect([second.ctx.info.attempt, second.ctx.info.epoch, second.token > first.token]).toEqual([
        1,
        2,
        true,
      ]);
      second.complete();
      await expect(run.result({ timeoutMs: 10_000, pollIntervalMs: 100 })).resolves.toEqual({
        by: `token ${second.token}`,
      });
    });

    it('keeps the epoch counting when a released step is claimed again, though the attempt is not charged', async () => {
      const engine = await target.engine();
      const held = holdActivity('held', { leaseMs: LEASE_MS });
      const w1 = engine.worker({ activities: [held.activity], workerId: 'w1' });
      await w1.start();
      const run = await engine.client.enqueue(held.activity, {});
      const first = await held.next();
      const released = new Promise<void>((resolve) => w1.events.once('attempt:released', () => resolve()));
      await w1.stop({ graceMs: 0 });
      await released;
      const back = await stepOfRun(engine, run.runId);
      expect([back.status, back.attempt, back.epoch, back.token]).toEqual([
        'scheduled',
        0,
        1,
        first.token.toString(),
      ]);

      const w2 = engine.worker({ activities: [held.activity], workerId: 'w2' });
      await w2.start();
      const second = await held.next();
      expect([second.ctx.info.attempt, second.ctx.info.epoch, second.token > first.token]).toEqual([
        1,
        2,
        true,
      ]);
      second.complete();
      await run.result({ timeoutMs: 10_000, pollIntervalMs: 100 });
    });

    it('issues a higher token after expiry maintenance failed a step and the run is retried', async () => {
      const engine = await target.engine();
      const held = holdActivity('held', { leaseMs: LEASE_MS, retry: { maximumAttempts: 1 } });
      const worker = engine.worker({ activities: [held.activity], pollIntervalMs: 50 });
      await worker.start();
      const run = await engine.client.enqueue(held.activity, {});
      const first = await held.next();
      await advanceClock(engine, LEASE_MS + 1);
      expect(await resultError(engine, run.runId)).toBeInstanceOf(RunFailedError);
      // Ending a running step is fenced like a claim: its token was bumped past the lost attempt's.
      const failed = await stepOfRun(engine, run.runId);
      expect([failed.status, failed.epoch, BigInt(failed.token!) > first.token]).toEqual(['failed', 1, true]);

      await engine.client.retry(run.runId);
      const second = await held.next();
      expect([second.ctx.info.epoch, second.token > BigInt(failed.token!)]).toEqual([2, true]);
      second.complete();
      await run.result({ timeoutMs: 10_000, pollIntervalMs: 100 });
    });

    it('refuses a manual UPDATE that lowers a step’s token or epoch, with SQLSTATE PL001', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ activities: [alwaysFails], pollIntervalMs: 50 });
      await worker.start();
      const run = await engine.client.enqueue(alwaysFails, {});
      await resultError(engine, run.runId);
      await worker.stop();
      const step = await stepOfRun(engine, run.runId);
      const before = await stepRowJson(engine, step.id);
      const steps = engine.names.steps;
      const where = sql`WHERE id = ${step.id}::uuid`;

      for (const change of [
        sql`UPDATE ${steps} SET fencing_token = fencing_token - 1 ${where}`,
        sql`UPDATE ${steps} SET fencing_token = NULL ${where}`,
        sql`UPDATE ${steps} SET epoch = epoch - 1 ${where}`,
        sql`UPDATE ${steps} SET fencing_token = fencing_token + 5, epoch = 0 ${where}`,
      ]) {
        expect(sqlState(await rejectionOf(engine.database.rows(change)))).toBe('PL001');
      }
      expect(await stepRowJson(engine, step.id)).toBe(before);
      // Raising them is allowed (that is what every claim does).
      await engine.database.rows(
        sql`UPDATE ${steps} SET fencing_token = fencing_token + 1, epoch = epoch + 1 ${where}`,
      );
      expect((await stepOfRun(engine, run.runId)).epoch).toBe(step.epoch + 1);
    });

    it('refuses a manual UPDATE that lowers a run’s turn token or turn epoch, with SQLSTATE PL001', async () => {
      const engine = await target.engine();
      const run = await engine.client.enqueue(alwaysFails, {});
      const runs = engine.names.runs;
      const where = sql`WHERE id = ${run.runId}::uuid`;
      await engine.database.rows(sql`UPDATE ${runs} SET turn_token = 1000, turn_epoch = 3 ${where}`);

      for (const change of [
        sql`UPDATE ${runs} SET turn_token = 999 ${where}`,
        sql`UPDATE ${runs} SET turn_token = NULL ${where}`,
        sql`UPDATE ${runs} SET turn_epoch = 2 ${where}`,
      ]) {
        expect(sqlState(await rejectionOf(engine.database.rows(change)))).toBe('PL001');
      }
      const [row] = await engine.database.rows<{ turn_token: string; turn_epoch: number }>(
        sql`SELECT turn_token::text, turn_epoch FROM ${runs} ${where}`,
      );
      expect(row).toEqual({ turn_token: '1000', turn_epoch: 3 });
    });
  });
}
