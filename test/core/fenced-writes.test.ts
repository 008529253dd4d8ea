/**
 * Owner writes are fenced (DESIGN.md §4 invariants 2–5): a superseded attempt's heartbeat, completion, failure,
 * release and fenced transaction are each rejected with LeaseLostError (stale and current token), leave the
 * step row exactly as it was, and append one `attempt:stale-rejected` event; expiry is final; a completion
 * retried after an unknown outcome is applied once; attempts exhausted by expiry fail the step and its run.
 *
 * The zombie is real: worker w1 runs attempt 1 of a held activity, the database clock jumps past its lease,
 * worker w2 claims attempt 2, and then w1's attempt makes its late write through its own context and worker.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { LeaseLostError, RunFailedError } from '@palisade/sdk';
import { createEngine, type Engine, type Worker } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { claimSteps, completeStep, failStep } from '@palisade/engine/testing/internals';
import { createTcpProxy } from '../support/tcp-proxy.js';
import { nextEvent, useEngineTarget, type EngineTarget } from '../support/engine.js';
import {
  attemptsOfStep,
  eventsOfRun,
  rejectionOf,
  stepOfRun,
  stepRowJson,
  type StoredEvent,
} from './engine-rows.js';
import { holdActivity, type HeldActivity, type HeldAttempt } from './held-activity.js';

/** Long enough that no automatic heartbeat (every lease / 3) fires while a test runs. */
const LEASE_MS = 5 * 60_000;
/** Past the lease and the default reclaim backoff of attempt 2 (≤ 1 s). */
const PAST_LEASE_MS = LEASE_MS + 5_000;

interface Superseded {
  engine: Engine;
  held: HeldActivity;
  w1: Worker;
  w2: Worker;
  runId: string;
  stepId: string;
  /** Attempt 1, on w1, superseded. */
  stale: HeldAttempt;
  /** Attempt 2, on w2, the current owner. */
  current: HeldAttempt;
  /** The step row (as JSON text) once attempt 2 holds it, before any late write. */
  before: string;
}

/** Attempt 1 runs on w1; its lease expires (time travel); w2 claims attempt 2. Both activities wait. */
async function supersededAttempt(
  target: EngineTarget,
  whileCurrent?: (attempt: HeldAttempt, engine: Engine) => Promise<void>,
): Promise<Superseded> {
  const engine = await target.engine();
  const held = holdActivity('held', { leaseMs: LEASE_MS });
  // Concurrency 1: while w1 holds attempt 1 it claims nothing else, so attempt 2 surely goes to w2.
  const w1 = engine.worker({ activities: [held.activity], concurrency: 1, workerId: 'w1' });
  await w1.start();
  const run = await engine.client.enqueue(held.activity, {});
  const stale = await held.next();
  await whileCurrent?.(stale, engine);
  await advanceClock(engine, PAST_LEASE_MS);
  const w2 = engine.worker({ activities: [held.activity], concurrency: 1, workerId: 'w2' });
  await w2.start();
  const current = await held.next();
  expect(current.ctx.info.workerId).toBe('w2');
  expect(current.token).toBeGreaterThan(stale.token);
  const stepId = stale.ctx.info.stepId;
  const before = await stepRowJson(engine, stepId);
  return { engine, held, w1, w2, runId: run.runId, stepId, stale, current, before };
}

/** The next `attempt:stale-rejected` of `worker`: the error its refused write raised. */
function staleRejection(worker: Worker): Promise<{ error: LeaseLostError }> {
  return nextEvent<{ error: LeaseLostError }>(worker.events, 'attempt:stale-rejected');
}

/**
 * The late write of `operation` by `s.stale` was refused with `error` and left no trace but its one recorded
 * rejection: the step row is as attempt 2 found it.
 */
async function expectRefused(s: Superseded, error: unknown, operation: string): Promise<void> {
  expectSuperseded(error, operation, s);
  expect(await stepRowJson(s.engine, s.stepId)).toBe(s.before);
  expectOneRejection(
    await eventsOfRun(s.engine, s.runId, 'attempt:stale-rejected'),
    operation,
    s.stale,
    s.current.token,
  );
}

/** The error a LeaseLostError must be for a write of `operation` by `stale` superseded by `current`. */
function expectSuperseded(
  error: unknown,
  operation: string,
  s: { stale: HeldAttempt; current: HeldAttempt },
): void {
  expect(error).toBeInstanceOf(LeaseLostError);
  const e = error as LeaseLostError;
  expect({
    code: e.code,
    operation: e.operation,
    staleToken: e.staleToken,
    currentToken: e.currentToken,
    reason: e.reason,
  }).toEqual({
    code: 'LEASE_LOST',
    operation,
    staleToken: s.stale.token,
    currentToken: s.current.token,
    reason: 'superseded',
  });
}

/** The run's one `attempt:stale-rejected` event, which must describe a rejected write of `operation`. */
function expectOneRejection(
  events: readonly StoredEvent[],
  operation: string,
  stale: HeldAttempt,
  currentToken: bigint,
  reason = 'superseded',
): void {
  expect(
    events.map((e) => ({ attempt: e.attempt, epoch: e.epoch, token: e.token, worker: e.worker_id })),
  ).toEqual([{ attempt: 1, epoch: 1, token: stale.token.toString(), worker: 'w1' }]);
  expect(events[0]?.data).toEqual({
    operation,
    staleToken: stale.token.toString(),
    currentToken: currentToken.toString(),
    reason,
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`fenced owner writes on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('rejects a heartbeat from a superseded attempt and poisons its context', async () => {
      const s = await supersededAttempt(target);

      const error = await rejectionOf(s.stale.ctx.heartbeat({ page: 9 }));

      await expectRefused(s, error, 'heartbeat');
      expect(s.stale.ctx.signal.aborted).toBe(true);
      // Poisoned: later calls throw the same error without reaching the database.
      expect(await rejectionOf(s.stale.ctx.heartbeat())).toBe(error);
      expect(await rejectionOf(s.stale.ctx.fencedTransaction(() => Promise.resolve()))).toBe(error);
      expect(await eventsOfRun(s.engine, s.runId, 'attempt:stale-rejected')).toHaveLength(1);
      // The current owner is unaffected.
      await expect(s.current.ctx.heartbeat()).resolves.toBeUndefined();
    });

    it('rejects a completion from a superseded attempt; the successor’s result is the one recorded', async () => {
      const s = await supersededAttempt(target);
      const rejected = staleRejection(s.w1);

      s.stale.complete('zombie');
      const { error } = await rejected;

      await expectRefused(s, error, 'complete');
      s.current.complete('successor');
      await expect(
        s.engine.client.getHandle(s.runId).result({ timeoutMs: 10_000, pollIntervalMs: 100 }),
      ).resolves.toEqual({ by: 'successor' });
      const terminal = (await eventsOfRun(s.engine, s.runId)).filter((e) => e.terminal);
      expect(terminal.map((e) => [e.type, e.token])).toEqual([
        ['step:completed', s.current.token.toString()],
        ['run:completed', null],
      ]);
    });

    it('rejects a failure from a superseded attempt', async () => {
      const s = await supersededAttempt(target);
      const rejected = staleRejection(s.w1);

      s.stale.fail(new Error('zombie failure'));
      const { error } = await rejected;

      await expectRefused(s, error, 'fail');
      expect(await eventsOfRun(s.engine, s.runId, 'attempt:failed')).toEqual([]);
    });

    it('rejects a release from a superseded attempt when its worker shuts down', async () => {
      const s = await supersededAttempt(target);
      const rejected = staleRejection(s.w1);

      // Stopping w1 aborts attempt 1 (reason shutdown); it stops, and w1 tries to hand the step back.
      await s.w1.stop({ graceMs: 0 });
      const { error } = await rejected;

      await expectRefused(s, error, 'release');
      expect(await eventsOfRun(s.engine, s.runId, 'attempt:released')).toEqual([]);
    });

    it('rolls back a superseded attempt’s fenced transaction and commits the successor’s', async () => {
      const ledger = (engine: Engine) => sql.raw(`"${engine.schema}"."ledger"`);
      const write = (attempt: HeldAttempt, engine: Engine, note: string) =>
        attempt.ctx.fencedTransaction(async (tx) => {
          await tx.execute(
            sql`INSERT INTO ${ledger(engine)} (note, token) VALUES (${note}, ${attempt.token.toString()}::bigint)`,
          );
          return note;
        });
      const s = await supersededAttempt(target, async (attempt, engine) => {
        await engine.database.rows(
          sql`CREATE TABLE ${ledger(engine)} (note text NOT NULL, token bigint NOT NULL)`,
        );
        // While it owns the step, the same attempt's fenced writes commit.
        await expect(write(attempt, engine, 'while current')).resolves.toBe('while current');
      });

      const error = await rejectionOf(write(s.stale, s.engine, 'zombie'));

      await expectRefused(s, error, 'fenced-transaction');
      await expect(write(s.current, s.engine, 'successor')).resolves.toBe('successor');
      const rows = await s.engine.database.rows<{ note: string; token: string }>(
        sql`SELECT note, token::text FROM ${ledger(s.engine)} ORDER BY token`,
      );
      expect(rows).toEqual([
        { note: 'while current', token: s.stale.token.toString() },
        { note: 'successor', token: s.current.token.toString() },
      ]);
    });

    it('rejects a heartbeat after the lease expired even though nobody reclaimed the step', async () => {
      const engine = await target.engine();
      // A one-hour backoff before a reclaim keeps the expired step unclaimed while the test looks at it.
      const held = holdActivity('held', {
        leaseMs: LEASE_MS,
        retry: { initialIntervalMs: '1h', backoffCoefficient: 1, jitter: 0 },
      });
      const w1 = engine.worker({ activities: [held.activity], concurrency: 1, workerId: 'w1' });
      await w1.start();
      const run = await engine.client.enqueue(held.activity, {});
      const stale = await held.next();
      await advanceClock(engine, LEASE_MS + 1_000);
      const stepId = stale.ctx.info.stepId;
      const before = await stepRowJson(engine, stepId);

      const error = await rejectionOf(stale.ctx.heartbeat());

      expect(error).toBeInstanceOf(LeaseLostError);
      const e = error as LeaseLostError;
      expect([e.code, e.operation, e.staleToken, e.currentToken, e.reason]).toEqual([
        'LEASE_LOST',
        'heartbeat',
        stale.token,
        stale.token,
        'expired',
      ]);
      // Not revived: same token, same (past) expiry, still waiting for a new claim.
      expect(await stepRowJson(engine, stepId)).toBe(before);
      expectOneRejection(
        await eventsOfRun(engine, run.runId, 'attempt:stale-rejected'),
        'heartbeat',
        stale,
        stale.token,
        'expired',
      );
      // Only a new claim makes progress, under a new token — even on the very same worker.
      await advanceClock(engine, 60 * 60_000);
      const next = await held.next();
      expect([next.ctx.info.workerId, next.ctx.info.epoch, next.token > stale.token]).toEqual([
        'w1',
        2,
        true,
      ]);
      next.complete();
    });

    it('applies a completion retried after an unknown outcome once, with one terminal event', async () => {
      const engine = await target.engine();
      const held = holdActivity('held', { leaseMs: LEASE_MS });
      const run = await engine.client.enqueue(held.activity, {});
      // The claim and completion statements a worker makes, called directly: the same completion is sent
      // twice with the same nonce, as a worker does when the reply to the first never arrived.
      const [claim] = await claimSteps(engine.database, engine.names, {
        workerId: 'w1',
        claimRequestId: randomUUID(),
        queues: ['default'],
        activityNames: ['held'],
        limit: 1,
      });
      if (!claim) throw new Error('nothing claimed');
      const ref = {
        runId: claim.run_id,
        stepId: claim.id,
        stepLabel: 'held#0',
        attempt: claim.attempt,
        token: BigInt(claim.token),
        nonce: claim.nonce,
      };

      expect(await completeStep(engine.database, engine.names, { ...ref, output: { by: 'w1' } })).toBe(
        'applied',
      );
      const after = await stepRowJson(engine, claim.id);
      expect(await completeStep(engine.database, engine.names, { ...ref, output: { by: 'w1' } })).toBe(
        'replayed',
      );
      expect(await stepRowJson(engine, claim.id)).toBe(after);
      const events = await eventsOfRun(engine, run.runId);
      expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual([
        'step:completed',
        'run:completed',
      ]);
      expect(events.filter((e) => e.type === 'attempt:stale-rejected')).toEqual([]);
      expect((await attemptsOfStep(engine, claim.id)).map((a) => a.outcome)).toEqual(['completed']);

      // A failure the same attempt sends afterwards is another write, which did not happen: rejected, not
      // reported as replayed (the completion left this attempt's nonce on the step).
      const lateFailure = await rejectionOf(
        failStep(engine.database, engine.names, { ...ref, error: failure(), retry: true }),
      );
      expect([(lateFailure as LeaseLostError).code, (lateFailure as LeaseLostError).reason]).toEqual([
        'LEASE_LOST',
        'completed',
      ]);
      expect(await stepRowJson(engine, claim.id)).toBe(after);
      // Another attempt's nonce with the same token is not this attempt: rejected, recorded.
      const forged = await rejectionOf(
        completeStep(engine.database, engine.names, {
          ...ref,
          nonce: randomUUID(),
          output: { by: 'forged' },
        }),
      );
      expect([(forged as LeaseLostError).code, (forged as LeaseLostError).reason]).toEqual([
        'LEASE_LOST',
        'completed',
      ]);
      const rejections = await eventsOfRun(engine, run.runId, 'attempt:stale-rejected');
      expect(rejections.map((e) => e.data?.operation)).toEqual(['fail', 'complete']);
      expect((await stepOfRun(engine, run.runId)).output).toEqual({ by: 'w1' });
    });

    it('fails a step whose attempts all lost their leases, and its run, saying the lease expired', async () => {
      const engine = await target.engine();
      const held = holdActivity('held', { leaseMs: LEASE_MS, retry: { maximumAttempts: 2 } });
      const worker = engine.worker({
        activities: [held.activity],
        concurrency: 2,
        workerId: 'w1',
        pollIntervalMs: 50,
      });
      await worker.start();
      const handle = await engine.client.enqueue(held.activity, {});
      const first = await held.next();
      await advanceClock(engine, PAST_LEASE_MS);
      const second = await held.next();
      expect([second.ctx.info.attempt, second.token > first.token]).toEqual([2, true]);
      await advanceClock(engine, LEASE_MS + 1);

      const error = await rejectionOf(handle.result({ timeoutMs: 10_000, pollIntervalMs: 100 }));

      expect(error).toBeInstanceOf(RunFailedError);
      const failureOfRun = (error as RunFailedError).failure;
      expect(failureOfRun.type).toBe('LeaseExpired');
      expect(failureOfRun.message).toMatch(/attempt 2 of 2 .*lease expired/);
      const step = await stepOfRun(engine, handle.runId);
      expect([step.status, (step.error as { type: string }).type]).toEqual(['failed', 'LeaseExpired']);
      expect((await attemptsOfStep(engine, step.id)).map((a) => [a.attempt, a.outcome])).toEqual([
        [1, 'lease_expired'],
        [2, 'lease_expired'],
      ]);
      const terminal = (await eventsOfRun(engine, handle.runId)).filter((e) => e.terminal);
      expect(terminal.map((e) => e.type)).toEqual(['step:failed', 'run:failed']);
      // Expiry maintenance bumped the token: the last owner's late completion is refused, nothing changes.
      const before = await stepRowJson(engine, step.id);
      const rejected = staleRejection(worker);
      second.complete('too late');
      const late = (await rejected).error;
      expect([late.code, late.staleToken, late.currentToken! > second.token]).toEqual([
        'LEASE_LOST',
        second.token,
        true,
      ]);
      expect(await stepRowJson(engine, step.id)).toBe(before);
      first.complete('later still');
    });
  });
}

function failure() {
  return { type: 'Error', message: 'late failure', nonRetryable: false };
}

describe('fenced owner writes through a connection that drops replies', () => {
  const target = useEngineTarget('postgres');

  it('records a completion whose reply was lost exactly once, when the worker retries it', async () => {
    const proxy = await createTcpProxy('127.0.0.1', Number(new URL(target.url()).port || 5432));
    try {
      // Migrated and read directly; only the worker's engine goes through the proxy.
      const direct = await target.engine();
      const engine = await createEngine({
        databaseUrl: proxy.url(target.url()),
        schema: direct.schema,
        migrate: false,
      });
      try {
        const held = holdActivity('held', { leaseMs: LEASE_MS });
        const worker = engine.worker({ activities: [held.activity], concurrency: 1, workerId: 'w1' });
        await worker.start();
        const handle = await engine.client.enqueue(held.activity, {});
        const attempt = await held.next();
        // Settles once the completion committed: woken by the run's NOTIFY (a waiter registered first) or, if it
        // registered after the commit, by reading the run's end. Its engine does not go through the proxy.
        const committed = direct.client
          .getHandle(handle.runId)
          .result({ timeoutMs: 20_000, pollIntervalMs: '1h' });
        // The completion statement reaches the server and commits; its reply is thrown away. The marker is in
        // the statement's parameters (the output), which are sent only to execute it — the SQL text may be sent
        // earlier, alone, to prepare the statement.
        const output = `w1-${randomUUID()}`;
        const rule = proxy.dropReplyAfter(output);
        const completed = nextEvent(worker.events, 'attempt:completed');
        attempt.complete(output);
        await rule.tripped;
        await committed;
        // The connection then dies, so the worker sees a transient error and sends the completion again.
        proxy.restore();
        proxy.reset();
        await completed;

        const events = await eventsOfRun(direct, handle.runId);
        expect(events.filter((e) => e.terminal).map((e) => e.type)).toEqual([
          'step:completed',
          'run:completed',
        ]);
        expect(events.filter((e) => e.type === 'attempt:stale-rejected')).toEqual([]);
        expect(rule.trippedCount()).toBe(1);
        expect((await attemptsOfStep(direct, attempt.ctx.info.stepId)).map((a) => a.outcome)).toEqual([
          'completed',
        ]);
        await expect(
          direct.client.getHandle(handle.runId).result({ timeoutMs: 10_000, pollIntervalMs: 100 }),
        ).resolves.toEqual({ by: output });
      } finally {
        await engine.close({ graceMs: 0 });
      }
    } finally {
      await proxy.close();
    }
  });
});
