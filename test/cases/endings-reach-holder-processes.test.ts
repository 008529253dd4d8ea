/**
 * Every ending reaches its holder, on real worker processes (issue 9; DESIGN.md §4 invariants 12 and 13).
 *
 * The matrix of ../core/endings-reach-holder.test.ts, with the holder H1 of `compensate` in worker process W1 and
 * its successor H2 in worker process W2; this process is the operator (client, time travel, the revoke UPDATE)
 * and reads the fenced resource's table. The workflow is `try { await ctx.run(refuse) } catch { return await
 * ctx.run(compensate) }` (../fixtures/commanded-activity.ts). An admin path ends or supersedes H1 while W1 still
 * believes it holds the lease — the database clock is moved, never W1's: a retry after the run failed, a retry
 * after it was cancelled, a cancel alone, an operator revoke, or an expiry reclaim. H2 then writes to a fenced
 * resource, and H1 is told over IPC to come back with a heartbeat, a completion, a failure, a fenced transaction
 * or a write to that resource. It must be refused with the path's reason, recorded, and its signal fired; the
 * resource keeps only H2's effect; scope, epoch and token of the position behave as invariants 6 and 13 say.
 *
 * One pair of processes serves every case, each on a fresh run. Both have one activity slot. Before a run starts,
 * W2's slot is taken by a `park` attempt (queue `parking`, served by W2 alone), so W1 claims `refuse` and then
 * `compensate`; once the admin path is taken, the park is released and W2 — the only worker with a free slot, H1
 * still filling W1's — is the one granted the successor. Leases are 30 minutes, so the worker-wide heartbeat
 * (every L / 3) never runs within the file: H1 comes back only when told to.
 */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '@palisade/engine';
import {
  PARKING_QUEUE,
  commandedActivity,
  compensatingWorkflow,
  heldEffectsDdl,
} from '../fixtures/commanded-activity.js';
import type {
  ActivityCommand,
  ChildMessageOf,
  ErrorInfo,
  FixtureTimings,
  WorkerProcessConfig,
} from '../fixtures/worker-protocol.js';
import { useTestDatabase } from '../support/postgres.js';
import { spawnWorkerProcess, type WorkerProcess } from '../support/worker-process.js';
import {
  ADMIN_PATHS,
  EXPECTED_REASON,
  comebacksAfter,
  takeAdminPath,
  type AdminPath,
  type Comeback,
} from '../support/ending-paths.js';

const EXTENSION_MODULE = fileURLToPath(new URL('../fixtures/commanded-activity.ts', import.meta.url));
const LEASE_MS = 30 * 60_000;
const timings: FixtureTimings = {
  leaseMs: LEASE_MS,
  startToCloseTimeoutMs: 2 * LEASE_MS,
  // A park whose lease the time travel ends must not come back to take W2's slot again.
  retry: { maximumAttempts: 1 },
};

const ACTION: Record<Comeback, ActivityCommand['action']> = {
  heartbeat: 'heartbeat',
  completion: 'complete',
  failure: 'fail',
  'fenced-transaction': 'fenced-transaction',
  'fenced-resource': 'fenced-resource',
};

const workflow = compensatingWorkflow(timings);
const park = commandedActivity('park', PARKING_QUEUE, timings);

type Held = ChildMessageOf<'held:started'>;

interface StepRow {
  id: string;
  status: string;
  epoch: number;
  fencing_scope: string;
  retired: boolean;
}

describe('every ending reaches its holder in another worker process', () => {
  const databaseUrl = useTestDatabase();
  let engine: Engine;
  let admin: postgres.Sql;
  let w1: WorkerProcess;
  let w2: WorkerProcess;

  beforeAll(async () => {
    const schema = `t_${randomBytes(5).toString('hex')}`;
    engine = await createEngine({ databaseUrl: databaseUrl(), schema });
    admin = postgres(databaseUrl(), { max: 2, onnotice: () => undefined });
    await admin.unsafe(heldEffectsDdl(schema));
    const config = (workerId: string, queues: string[]): WorkerProcessConfig => ({
      databaseUrl: databaseUrl(),
      schema,
      workerId,
      timings,
      queues,
      concurrency: 1,
      pollIntervalMs: 50,
      shutdownGraceMs: 500,
      extensionModule: EXTENSION_MODULE,
    });
    [w1, w2] = await Promise.all([
      spawnWorkerProcess(config('w1', ['default'])),
      spawnWorkerProcess(config('w2', ['default', PARKING_QUEUE])),
    ]);
  });

  afterAll(async () => {
    await Promise.all([w1?.stop(500), w2?.stop(500)]);
    await admin?.end({ timeout: 1 });
    await engine?.close({ graceMs: 0 });
  });

  async function stepsAt(runId: string, seq: number): Promise<StepRow[]> {
    return engine.database.rows<StepRow>(sql`
      SELECT id::text, status, epoch, fencing_scope, retired_at IS NOT NULL AS retired
        FROM ${engine.names.steps} WHERE run_id = ${runId}::uuid AND seq = ${seq} ORDER BY created_at`);
  }

  /** Epoch and token of every attempt at position `seq` of the run, whichever step row it ran under, in claim order. */
  async function attemptsAt(runId: string, seq: number): Promise<{ epoch: number; token: string }[]> {
    return engine.database.rows(sql`
      SELECT a.epoch, a.fencing_token::text AS token
        FROM ${engine.names.attempts} a JOIN ${engine.names.steps} s ON s.id = a.step_id
       WHERE s.run_id = ${runId}::uuid AND s.seq = ${seq} ORDER BY a.fencing_token`);
  }

  async function staleRejections(runId: string): Promise<[string | null, unknown][]> {
    const rows = await engine.database.rows<{ token: string | null; data: { reason?: unknown } | null }>(sql`
      SELECT fencing_token::text AS token, data FROM ${engine.names.runEvents}
       WHERE run_id = ${runId}::uuid AND type = 'attempt:stale-rejected' ORDER BY at, rank, ord`);
    return rows.map((r) => [r.token, r.data?.reason]);
  }

  async function effects(scope: string): Promise<{ by: string; via: string }[]> {
    return admin.unsafe(
      `SELECT by, via FROM "${engine.schema}".held_effects WHERE scope = $1 ORDER BY fencing_token`,
      [scope],
    );
  }

  const holding = (runId: string) => (m: Held) => m.attempt.runId === runId && m.activity === 'compensate';

  /** Bring H1 (in W1) to hold `compensate` (position 1), take `path`, then free W2 to take the successor H2. */
  async function scene(path: AdminPath): Promise<{ runId: string; h1: Held; h2: Held | undefined }> {
    // W2's only slot is taken first, so the run's activities can go to W1 alone.
    const parkRun = await engine.client.enqueue(park, {});
    const parked = await w2.waitFor('held:started', (m) => m.attempt.runId === parkRun.runId);
    const handle = await engine.client.start(workflow, {
      maximumAttempts: path === 'revoke' || path === 'expiry' ? 2 : 1,
    });
    const runId = handle.runId;
    const h1 = await w1.waitFor('held:started', holding(runId));

    await takeAdminPath(engine, handle, path, { leaseMs: LEASE_MS });
    // Only now can W2 claim anything of the run; W1's one slot is still H1's.
    w2.command({ token: parked.attempt.token, action: 'complete', by: 'park' });
    await w2.waitFor('fixture:ended', (m) => m.attempt.token === parked.attempt.token);
    if (path === 'cancel') return { runId, h1, h2: undefined };
    return { runId, h1, h2: await w2.waitFor('held:started', holding(runId)) };
  }

  /** H1 comes back with `how`; resolves with the error it met (its signal, if fired by then, said `abortReason`). */
  async function comeBack(h1: Held, how: Comeback, abortReason: string): Promise<ErrorInfo | undefined> {
    const from = w1.mark();
    const token = h1.attempt.token;
    w1.command({ token, action: ACTION[how], by: 'h1' });
    if (how === 'completion' || how === 'failure') {
      // The engine refuses the outcome the activity returned or threw.
      return (await w1.waitFor('attempt:stale-rejected', (m) => m.attempt.token === token, { after: from }))
        .error;
    }
    const outcome = await w1.waitFor('held:outcome', (m) => m.attempt.token === token, { after: from });
    if (how !== 'fenced-resource') {
      // The call that was refused fired the signal before it returned.
      expect(outcome).toMatchObject({ aborted: true, abortReason });
    }
    return outcome.error;
  }

  for (const path of ADMIN_PATHS) {
    for (const how of comebacksAfter(path)) {
      const effect = path === 'cancel' ? 'writes nothing' : "keeps only W2's effect";
      it(`refuses W1's ${how} after ${path}, saying why, and ${effect}`, async () => {
        const { runId, h1, h2 } = await scene(path);
        const scope = `run:${runId}/seq:1`;
        expect(h1).toMatchObject({ workerId: 'w1', scope });
        if (h2) {
          // The successor, in the other process, writes first.
          expect(h2).toMatchObject({ workerId: 'w2', scope });
          w2.command({ token: h2.attempt.token, action: 'fenced-resource', by: 'h2' });
          const written = await w2.waitFor('held:outcome', (m) => m.attempt.token === h2.attempt.token);
          expect(written.error).toBeUndefined();
        }

        const abortReason = path === 'cancel' ? 'cancelled' : 'lease-lost';
        const error = await comeBack(h1, how, abortReason);
        expect(error).toMatchObject({
          name: 'LeaseLostError',
          code: 'LEASE_LOST',
          staleToken: h1.attempt.token,
        });
        if (how === 'fenced-resource') {
          // The resource knows nothing of the engine: it refuses H1 because H2's newer token holds the scope.
          expect(error?.currentToken).toBe(h2?.attempt.token);
          // H1 still believes it holds the lease; its completion is refused by the engine in turn.
          w1.command({ token: h1.attempt.token, action: 'complete', by: 'h1' });
          const late = await w1.waitFor(
            'attempt:stale-rejected',
            (m) => m.attempt.token === h1.attempt.token,
          );
          expect(late.error.reason).toBe(EXPECTED_REASON[path]);
        } else {
          expect(error?.reason).toBe(EXPECTED_REASON[path]);
        }
        // Recorded as a stale write with the reason; H1's signal fired long before its 30-minute local deadline,
        // saying cancelled only for a cancel.
        expect(await staleRejections(runId)).toContainEqual([h1.attempt.token, EXPECTED_REASON[path]]);
        const signal = await w1.waitFor('fixture:signal', (m) => m.attempt.token === h1.attempt.token);
        expect(signal.reason).toBe(abortReason);
        await w1.waitFor('fixture:ended', (m) => m.attempt.token === h1.attempt.token);

        if (h2) {
          // One unit of work: same scope, epochs and tokens still growing, whichever row each attempt ran under.
          expect(h2.epoch).toBeGreaterThan(h1.epoch);
          expect(BigInt(h2.attempt.token)).toBeGreaterThan(BigInt(h1.attempt.token));
          w2.command({ token: h2.attempt.token, action: 'complete', by: 'h2' });
          await expect(engine.client.getHandle(runId).result({ timeoutMs: 20_000 })).resolves.toEqual({
            by: 'h2',
          });
          expect(await effects(scope)).toEqual([{ by: 'h2', via: 'fenced-resource' }]);
          const rows = await stepsAt(runId, 1);
          expect(rows.at(-1)).toMatchObject({ status: 'completed', retired: false });
          expect(new Set(rows.map((r) => r.fencing_scope))).toEqual(new Set([scope]));
          const epochs = rows.map((r) => r.epoch);
          expect(epochs).toEqual([...epochs].sort((a, b) => a - b));
          expect(new Set(epochs).size).toBe(epochs.length);
          const attempts = await attemptsAt(runId, 1);
          expect(attempts.length).toBeGreaterThanOrEqual(2);
          for (const [i, a] of attempts.entries()) {
            if (i === 0) continue;
            const before = attempts[i - 1] as { epoch: number; token: string };
            expect(a.epoch).toBeGreaterThan(before.epoch);
            expect(BigInt(a.token)).toBeGreaterThan(BigInt(before.token));
          }
          expect(attempts.at(-1)).toEqual({ epoch: h2.epoch, token: h2.attempt.token });
        } else {
          expect(await effects(scope)).toEqual([]);
        }
        // H1 was the only attempt of the position W1 started, H2 the only one W2 started.
        expect(w1.all('held:started', holding(runId))).toEqual([h1]);
        expect(w2.all('held:started', holding(runId))).toEqual(h2 ? [h2] : []);
      });
    }
  }
});
