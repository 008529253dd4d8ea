/**
 * Every ending reaches its holder, and a fencing scope is the unit of work (DESIGN.md §4 invariants 12 and 13).
 *
 * A workflow `try { await ctx.run(refuse) } catch { return await ctx.run(compensate) }` whose `compensate` is held
 * by attempt H1. An admin path ends or supersedes H1 while it still believes it holds its lease (the database
 * clock is moved, never the worker's): a retry after the run failed (H1's step retired and the position
 * scheduled again), a retry after the run was cancelled, a cancel alone, an operator revoke (a token bump), or an
 * expiry reclaim. A successor H2 then runs the same position and writes to a fenced resource under its
 * `ctx.info.fencing`. H1 comes back with a heartbeat, a completion, a failure, a fenced transaction or a write to
 * that resource — and is refused, with a reason, recorded, and its signal fired; the resource keeps only H2's
 * effect; scope, epoch and token of the position behave as invariants 6 and 13 say.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, LeaseLostError, type RetryPolicy } from '@palisade/sdk';
import { createFencedResource, type Engine, type Worker } from '@palisade/engine';
import { nextEvent, useEngineTarget, type EngineTarget } from '../support/engine.js';
import { eventsOfRun } from './engine-rows.js';
import { rejectionOf } from '../support/rejections.js';
import { holdActivity, type HeldActivity, type HeldAttempt } from './held-activity.js';
import {
  ADMIN_PATHS,
  EXPECTED_REASON,
  comebacksAfter,
  takeAdminPath,
  type AdminPath,
  type Comeback,
} from '../support/ending-paths.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { startWorker } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';

const LEASE_MS = 5 * 60_000;

const refuse = emptyActivity('refuse', {
  leaseMs: LEASE_MS,
  retry: { maximumAttempts: 1 },
  run() {
    return Promise.reject(
      new ApplicationFailure('refused on purpose', { type: 'Refused', nonRetryable: true }),
    );
  },
});

interface StepRow {
  id: string;
  seq: number;
  status: string;
  epoch: number;
  token: string | null;
  fencing_scope: string;
  retired: boolean;
}

async function stepsAt(engine: Engine, runId: string, seq: number): Promise<StepRow[]> {
  return engine.database.rows<StepRow>(sql`
    SELECT id::text, seq, status, epoch, fencing_token::text AS token, fencing_scope, retired_at IS NOT NULL AS retired
      FROM ${engine.names.steps} WHERE run_id = ${runId}::uuid AND seq = ${seq} ORDER BY created_at`);
}

/** A fenced resource on the engine's database (its own `fences` table), and a table of the effects it let in. */
async function effectsResource(target: EngineTarget, engine: Engine) {
  const table = `"${engine.schema}".effects`;
  const ddl = `CREATE TABLE ${table} (scope text NOT NULL, token bigint NOT NULL, by text NOT NULL)`;
  if (target.driver === 'postgres') {
    const client = target.sql();
    await client.unsafe(ddl);
    const resource = createFencedResource({ sql: client, schema: engine.schema });
    return {
      write: (f: { scope: string; token: bigint }, by: string) =>
        resource.write(f, (tx) =>
          tx.unsafe(`INSERT INTO ${table} VALUES ($1, $2, $3)`, [f.scope, f.token.toString(), by]),
        ),
      effects: async () =>
        (await client.unsafe<{ by: string }[]>(`SELECT by FROM ${table} ORDER BY token`)).map((r) => r.by),
    };
  }
  const pglite = target.pglite();
  await pglite.exec(ddl);
  const resource = createFencedResource({ pglite, schema: engine.schema });
  return {
    write: (f: { scope: string; token: bigint }, by: string) =>
      resource.write(f, (tx) =>
        tx.query(`INSERT INTO ${table} VALUES ($1, $2, $3)`, [f.scope, f.token.toString(), by]),
      ),
    effects: async () =>
      (await pglite.query<{ by: string }>(`SELECT by FROM ${table} ORDER BY token`)).rows.map((r) => r.by),
  };
}

interface Scene {
  engine: Engine;
  worker: Worker;
  held: HeldActivity;
  runId: string;
  h1: HeldAttempt;
  /** The successor, for the paths that grant one. */
  h2: HeldAttempt | undefined;
}

/**
 * A run of `compensating` (`refuse` fails, then `compensate` — held by the test — runs at position 1) on a worker of
 * its own, once H1 holds `compensate` under `retry`.
 */
async function compensatingRun(target: EngineTarget, retry: RetryPolicy) {
  const engine = await target.engine();
  const held = holdActivity('compensate', { leaseMs: LEASE_MS, retry });
  const compensating = noInputWorkflow('compensating', z.object({ by: z.string() }), async (ctx) => {
    try {
      await ctx.run(refuse, {});
      return { by: 'nobody' };
    } catch {
      return await ctx.run(held.activity, {});
    }
  });
  // No automatic heartbeat within a test (a third of a 5-minute lease): H1 comes back only when told to.
  const worker = await startWorker(engine, [compensating, refuse, held.activity], {
    pollIntervalMs: 50,
    concurrency: 4,
  });
  const handle = await engine.client.start(compensating, {});
  const h1 = await held.next();
  return { engine, worker, held, handle, h1 };
}

/** Bring H1 to hold `compensate` (position 1), then take `path`, leaving H2 (if any) holding the position. */
async function scene(target: EngineTarget, path: AdminPath): Promise<Scene> {
  const { engine, worker, held, handle, h1 } = await compensatingRun(target, {
    maximumAttempts: path === 'revoke' || path === 'expiry' ? 2 : 1,
    initialIntervalMs: 1,
  });
  const runId = handle.runId;

  await takeAdminPath(engine, handle, path, {
    leaseMs: LEASE_MS,
    // The position is not granted again while H1's lease (kept by the cancel) may still run.
    whileLeaseKept: () => expect(held.next(300)).rejects.toThrow(/no attempt/),
  });
  if (path === 'cancel') return { engine, worker, held, runId, h1, h2: undefined };
  const h2 = await held.next();
  return { engine, worker, held, runId, h1, h2 };
}

/** H1 comes back with `how`; resolves with the LeaseLostError it met. */
async function comeBack(
  s: Scene,
  how: Comeback,
  resource: Awaited<ReturnType<typeof effectsResource>>,
): Promise<LeaseLostError> {
  const rejected = nextEvent<{ error: LeaseLostError }>(s.worker.events, 'attempt:stale-rejected', (e) => {
    return e.error.staleToken === s.h1.token;
  });
  switch (how) {
    case 'heartbeat':
      return (await rejectionOf(s.h1.ctx.heartbeat({ late: true }))) as LeaseLostError;
    case 'completion':
      s.h1.complete('h1');
      return (await rejected).error;
    case 'failure':
      s.h1.fail(new Error('h1 failed late'));
      return (await rejected).error;
    case 'fenced-transaction':
      return (await rejectionOf(s.h1.ctx.fencedTransaction(() => Promise.resolve('h1')))) as LeaseLostError;
    case 'fenced-resource':
      return (await rejectionOf(resource.write(s.h1.ctx.info.fencing, 'h1'))) as LeaseLostError;
  }
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`every ending reaches its holder on ${driver}`, () => {
    const target = useEngineTarget(driver);

    for (const path of ADMIN_PATHS) {
      for (const how of comebacksAfter(path)) {
        it(`refuses the holder's ${how} after ${path}, saying why, and keeps only the successor's effect`, async () => {
          const s = await scene(target, path);
          const resource = await effectsResource(target, s.engine);
          if (s.h2) await resource.write(s.h2.ctx.info.fencing, 'h2');

          const error = await comeBack(s, how, resource);
          expect(error).toBeInstanceOf(LeaseLostError);
          if (how === 'fenced-resource') {
            // The resource knows nothing of the engine: it refuses H1 because H2's newer token holds the scope.
            expect(error.currentToken).toBe(s.h2?.token);
          } else {
            expect(s.h1.ctx.signal.aborted).toBe(true);
            expect(error.reason).toBe(EXPECTED_REASON[path]);
            // Recorded as a stale write, with the reason, and H1's signal says cancelled only for a cancel.
            const rejections = await eventsOfRun(s.engine, s.runId, 'attempt:stale-rejected');
            expect(rejections.map((e) => [e.token, e.data?.reason])).toContainEqual([
              s.h1.token.toString(),
              EXPECTED_REASON[path],
            ]);
            const abortReason = (s.h1.ctx.signal.reason as { reason?: string }).reason;
            expect(abortReason).toBe(path === 'cancel' ? 'cancelled' : 'lease-lost');
          }

          if (s.h2) {
            // One unit of work: same scope, epochs and tokens still growing, whichever row each attempt ran under.
            expect(s.h2.ctx.info.fencing.scope).toBe(s.h1.ctx.info.fencing.scope);
            expect(s.h1.ctx.info.fencing.scope).toBe(`run:${s.runId}/seq:1`);
            expect(s.h2.ctx.info.epoch).toBeGreaterThan(s.h1.ctx.info.epoch);
            expect(s.h2.token).toBeGreaterThan(s.h1.token);
            s.h2.complete('h2');
            await expect(s.engine.client.getHandle(s.runId).result({ timeoutMs: 20_000 })).resolves.toEqual({
              by: 'h2',
            });
            expect(await resource.effects()).toEqual(['h2']);
            const rows = await stepsAt(s.engine, s.runId, 1);
            expect(rows.at(-1)).toMatchObject({ status: 'completed', retired: false });
            expect(new Set(rows.map((r) => r.fencing_scope))).toEqual(new Set([`run:${s.runId}/seq:1`]));
            const epochs = rows.map((r) => r.epoch);
            expect(epochs).toEqual([...epochs].sort((a, b) => a - b));
            expect(new Set(epochs).size).toBe(epochs.length);
          } else {
            expect(await resource.effects()).toEqual([]);
          }
        });
      }
    }
  });
}

/** Whether the live (not retired) step at `seq` of run `runId` is due by the database clock, and its status. */
async function liveStepAt(engine: Engine, runId: string, seq: number) {
  const [row] = await engine.database.rows<{ status: string; due: boolean }>(sql`
    SELECT status, next_run_at <= ${engine.names.now} AS due FROM ${engine.names.steps}
     WHERE run_id = ${runId}::uuid AND seq = ${seq} AND retired_at IS NULL`);
  return row;
}

/**
 * Whether the live step at `seq` may be granted now: due by the database clock, or granted already — the refusal
 * that told the holder wakes the worker, which may claim the step before this read (the race made the test flaky).
 */
async function grantable(engine: Engine, runId: string, seq: number): Promise<boolean> {
  const step = await liveStepAt(engine, runId, seq);
  return step?.status === 'running' || (step?.status === 'scheduled' && step.due);
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`a told holder does not delay its successor on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('grants a step a retry reset under a live holder at once, once that holder was told', async () => {
      const engine = await target.engine();
      const held = holdActivity('single', { leaseMs: LEASE_MS, retry: { maximumAttempts: 1 } });
      const single = noInputWorkflow('single-held', z.object({ by: z.string() }), (ctx) =>
        ctx.run(held.activity, {}),
      );
      await startWorker(engine, [single, held.activity], { pollIntervalMs: 50 });
      const handle = await engine.client.start(single, {});
      const h1 = await held.next();
      await handle.cancel('operator');
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
      await engine.client.retry(handle.runId);
      // Reset under H1's live lease: not due while H1 may still run unaware.
      expect(await liveStepAt(engine, handle.runId, 0)).toEqual({ status: 'scheduled', due: false });

      const error = (await rejectionOf(h1.ctx.heartbeat())) as LeaseLostError;
      expect(error).toBeInstanceOf(LeaseLostError);
      expect(h1.ctx.signal.aborted).toBe(true);
      // H1 was told: its lease no longer holds the step back, by the database clock (not moved here).
      expect(await grantable(engine, handle.runId, 0)).toBe(true);
      const h2 = await held.next();
      expect(h2.token).toBeGreaterThan(h1.token);
      h2.complete('h2');
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ by: 'h2' });
    });

    it('grants a step re-created at a retired position at once, once the retired holder was told', async () => {
      const { engine, worker, held, handle, h1 } = await compensatingRun(target, { maximumAttempts: 1 });
      await handle.cancel('operator');
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
      // The retry retires `compensate`; `refuse` fails again and a turn schedules `compensate` anew at position 1.
      let onCommit: (() => void) | undefined;
      const recreated = new Promise<void>((resolve) => {
        onCommit = () =>
          void liveStepAt(engine, handle.runId, 1).then((row) => {
            if (row) resolve();
          });
      });
      worker.events.on('turn:committed', (e) => {
        if (e.runId === handle.runId) onCommit?.();
      });
      await engine.client.retry(handle.runId);
      await recreated;
      expect(await liveStepAt(engine, handle.runId, 1)).toEqual({ status: 'scheduled', due: false });

      const error = (await rejectionOf(h1.ctx.heartbeat())) as LeaseLostError;
      expect(error.reason).toBe('retired');
      expect(await grantable(engine, handle.runId, 1)).toBe(true);
      const h2 = await held.next();
      expect(h2.ctx.info.fencing.scope).toBe(h1.ctx.info.fencing.scope);
      expect(h2.token).toBeGreaterThan(h1.token);
      h2.complete('h2');
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ by: 'h2' });
    });
  });
}
