/**
 * The rotation of `ready` (migration 0026, STORAGE.md §3.6): four slots take turns; `<schema>.ready_rotate` moves
 * the oldest slot's live rows to the current slot, truncates the oldest and makes it current. What must hold: no
 * row is lost or duplicated — not when claims, heartbeats and completions race the rotation — the triggers still
 * find a step's row in whatever slot it is, a partition another transaction holds makes the rotation give up within
 * its lock_timeout (claims go on meanwhile) instead of queueing every claim behind its lock, and the claim still
 * corrects a stale row, whatever its slot.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { Engine } from '@palisade/engine';
import { setClockOffset } from '@palisade/engine/testing';
import {
  claimSteps,
  completeStep,
  heartbeatSteps,
  rotateReady,
  type ClaimedStepRow,
  type ReadyRotation,
} from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { readyMismatches } from '../support/ready-set.js';
import { attemptRefOf, attemptsOfStep, stepOfRun } from './engine-rows.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const job = emptyActivity('rotation-job', { leaseMs: 30_000, retry: { maximumAttempts: 3 } });
/** Rotate whenever asked: no pacing, no size threshold. */
const NOW = { minIntervalMs: 0, minBytes: 0 } as const;

function claim(engine: Engine, limit: number): Promise<ClaimedStepRow[]> {
  return claimSteps(engine.database, engine.names, {
    workerId: 'rotation-test',
    claimRequestId: randomUUID(),
    queues: ['default'],
    activityNames: [job.name],
    limit,
  });
}

async function currentSlot(engine: Engine): Promise<number> {
  const [row] = await engine.database.rows<{ slot: number }>(
    sql`SELECT current_slot AS slot FROM ${sql.raw(`"${engine.names.schema}"."ready_ring"`)}`,
  );
  if (!row) throw new Error('no ready_ring row');
  return row.slot;
}

/** How many ready rows each slot holds, as `{ slot: count }`. */
async function rowsBySlot(engine: Engine): Promise<Record<number, number>> {
  const rows = await engine.database.rows<{ slot: number; n: number }>(
    sql`SELECT slot, count(*)::int AS n FROM ${engine.names.ready} GROUP BY slot ORDER BY slot`,
  );
  return Object.fromEntries(rows.map((r) => [r.slot, r.n]));
}

/** Rotate `times` times, each asked to happen now; every one must happen. */
async function rotate(engine: Engine, times: number): Promise<void> {
  for (let i = 0; i < times; i++)
    expect(await rotateReady(engine.database, engine.names, NOW)).toBe('rotated');
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`the rotation of ready on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('grants exactly a claim’s limit when more are due, though its scan reads up to the next power of two', async () => {
      const engine = await target.engine();
      await engine.client.enqueueMany(
        job,
        Array.from({ length: 10 }, () => ({})),
      );
      // Scans of 4, 4 and 8 rows: each grant stops at the limit; the rows scanned past it stay claimable.
      expect(await claim(engine, 3)).toHaveLength(3);
      expect(await claim(engine, 3)).toHaveLength(3);
      expect(await claim(engine, 5)).toHaveLength(4);
      expect(await readyMismatches(engine)).toEqual([]);
    });

    it('moves the oldest slot’s rows to the current one, empties it and makes it current; triggers find moved rows', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      expect(await currentSlot(engine)).toBe(0);
      const runs = await engine.client.enqueueMany(
        job,
        Array.from({ length: 6 }, () => ({})),
      );
      expect(await rowsBySlot(engine)).toEqual({ 0: 6 });
      const [held] = await claim(engine, 1); // its row moves (the claim's UPDATE) within slot 0

      await rotate(engine, 1); // slot 1 (empty) made current; slot 0 untouched
      expect(await currentSlot(engine)).toBe(1);
      expect(await rowsBySlot(engine)).toEqual({ 0: 6 });
      await engine.client.enqueue(job, {}); // lands in slot 1
      expect(await rowsBySlot(engine)).toEqual({ 0: 6, 1: 1 });

      await rotate(engine, 3); // the third turn empties slot 0 into slot 3 and makes 0 current
      expect(await currentSlot(engine)).toBe(0);
      expect(await rowsBySlot(engine)).toEqual({ 1: 1, 3: 6 });
      expect(await readyMismatches(engine)).toEqual([]);

      // The triggers find the moved rows in slot 3: a heartbeat moves the held one, a completion deletes it.
      const [beat] = await heartbeatSteps(engine.database, engine.names, [
        { stepId: held!.id, token: BigInt(held!.token), nonce: held!.nonce },
      ]);
      expect(beat?.renewed).toBe(true);
      expect(await readyMismatches(engine)).toEqual([]);
      await completeStep(engine.database, engine.names, { ...attemptRefOf(held!), output: {} });
      expect(await rowsBySlot(engine)).toEqual({ 1: 1, 3: 5 });
      const rest = await claim(engine, 10);
      expect(rest).toHaveLength(6);
      for (const grant of rest)
        await completeStep(engine.database, engine.names, { ...attemptRefOf(grant), output: {} });
      expect(await rowsBySlot(engine)).toEqual({});
      for (const run of runs) expect((await stepOfRun(engine, run.runId)).status).toBe('completed');
    });

    it('waits until the current slot is old and large enough', async () => {
      const engine = await target.engine();
      const db = engine.database;
      expect(await rotateReady(db, engine.names, { minIntervalMs: 3_600_000, minBytes: 0 })).toBe('early');
      expect(await rotateReady(db, engine.names, { minIntervalMs: 0, minBytes: 1 << 30 })).toBe('early');
      expect(await currentSlot(engine)).toBe(0);
      await expect(rotateReady(db, engine.names, { minIntervalMs: -1, minBytes: 0 })).rejects.toThrow(
        /minIntervalMs must be a non-negative integer, got -1/,
      );
    });

    it('corrects a stale row in a slot that is not current', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      const run = await engine.client.enqueue(job, {});
      const step = await stepOfRun(engine, run.runId);
      const [grant] = await claim(engine, 1);
      await completeStep(engine.database, engine.names, { ...attemptRefOf(grant!), output: {} });
      // A stale row for the completed step in slot 2 (not current), due long ago.
      await engine.database.rows(sql`
        INSERT INTO ${engine.names.ready} (slot, queue, priority, due_at, name, step_id, run_id)
        VALUES (2, 'default', 0, ${engine.names.now} - interval '1 hour', ${job.name}, ${step.id}::uuid,
                ${run.runId}::uuid)`);
      expect(await rowsBySlot(engine)).toEqual({ 2: 1 });
      expect(await claim(engine, 10)).toEqual([]);
      expect(await rowsBySlot(engine)).toEqual({});
      expect(await attemptsOfStep(engine, step.id)).toHaveLength(1);
    });
  });
}

describe('the rotation of ready on postgres, with other sessions', () => {
  const target = useEngineTarget('postgres');

  it('is asked for by a worker that works, which turns the ring; a worker granted nothing never asks', async () => {
    const engine = await target.engine();
    // Well over the 256 kB the current slot must hold (~1,000 jobs' inserts and claim moves).
    await engine.client.enqueueMany(
      job,
      Array.from({ length: 2_500 }, () => ({})),
    );
    const before = await currentSlot(engine);
    const other = emptyActivity('rotation-other');
    const idle = engine.worker({ activities: [other], concurrency: 1 });
    const idleAsked: string[] = [];
    idle.events.on('ready:rotation', (e) => idleAsked.push(e.outcome));
    await idle.start();
    const busy = engine.worker({ activities: [job], concurrency: 10 });
    const busyAsked: string[] = [];
    const rotated = new Promise<void>((resolve) =>
      busy.events.on('ready:rotation', (e) => {
        busyAsked.push(e.outcome);
        if (e.outcome === 'rotated') resolve();
      }),
    );
    await busy.start();
    await rotated;
    expect(await currentSlot(engine)).toBe((before + 1) % 4);
    expect(await readyMismatches(engine)).toEqual([]);
    expect(idleAsked).toEqual([]);
    await busy.stop();
    await idle.stop();
  });

  it('gives up within its lock_timeout while a transaction holds the oldest slot, undoing its moves; claims go on', async () => {
    const engine = await target.engine();
    await setClockOffset(engine, 0);
    await engine.client.enqueueMany(
      job,
      Array.from({ length: 4 }, () => ({})),
    );
    await rotate(engine, 3); // slot 0, with the four rows, is now the oldest
    expect(await currentSlot(engine)).toBe(3);

    const holder = target.sql();
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let holding!: () => void;
    const held = new Promise<void>((resolve) => (holding = resolve));
    const holderTx = holder.begin(async (tx) => {
      await tx.unsafe(`SELECT count(*) FROM "${engine.names.schema}"."ready_0"`);
      holding();
      await released;
    });
    await held;
    try {
      // The rotation queues behind the holder's lock; a claim, which locks every partition, queues behind the
      // rotation. Both resolve while the holder still holds its lock: the rotation gave up, so the claim went on.
      const [outcome, grants] = await Promise.all([
        rotateReady(engine.database, engine.names, NOW),
        claim(engine, 2),
      ]);
      expect(outcome).toBe<ReadyRotation>('locked');
      expect(grants).toHaveLength(2);
      expect(await currentSlot(engine)).toBe(3);
      expect(await rowsBySlot(engine)).toEqual({ 0: 4 }); // the first pass's moves were undone
    } finally {
      release();
      await holderTx;
    }
    expect(await rotateReady(engine.database, engine.names, NOW)).toBe('rotated');
    expect(await rowsBySlot(engine)).toEqual({ 3: 4 });
    expect(await readyMismatches(engine)).toEqual([]);
  });

  it('loses and duplicates no row while claims, heartbeats and completions race rotations', async () => {
    const engine = await target.engine();
    await setClockOffset(engine, 0);
    const jobs = 400;
    const runs = await engine.client.enqueueMany(
      job,
      Array.from({ length: jobs }, () => ({})),
    );
    let completed = 0;
    let rotations = 0;
    let rotatorDone = false;
    const mismatches: unknown[] = [];
    const outcomes: Record<ReadyRotation, number> = { rotated: 0, busy: 0, early: 0, locked: 0 };

    // Each claimer claims a few, heartbeats them (moving their rows) and completes them, until every job is done
    // or — once the rotations are over — a claim finds nothing (then the count below says what was lost).
    const claimer = async (): Promise<void> => {
      for (;;) {
        const grants = await claim(engine, 5);
        if (grants.length === 0) {
          if (completed >= jobs || rotatorDone) return;
          continue;
        }
        await heartbeatSteps(
          engine.database,
          engine.names,
          grants.map((g) => ({ stepId: g.id, token: BigInt(g.token), nonce: g.nonce })),
        );
        for (const grant of grants) {
          await completeStep(engine.database, engine.names, { ...attemptRefOf(grant), output: {} });
          completed++;
        }
      }
    };
    const rotator = async (): Promise<void> => {
      while (completed < jobs && rotations < 500) {
        const outcome = await rotateReady(engine.database, engine.names, NOW);
        outcomes[outcome]++;
        rotations++;
        // ready and steps change in the same transactions, so any snapshot shows them agreeing: a row lost by a
        // rotation shows at once as a claimed (running) step without its row, even if its claimer ends it later.
        if (outcome === 'rotated') mismatches.push(...(await readyMismatches(engine)));
      }
      rotatorDone = true;
    };
    await Promise.all([rotator(), claimer(), claimer(), claimer()]);

    expect(outcomes.rotated).toBeGreaterThan(4); // the ring went round at least once while the jobs ran
    expect(mismatches).toEqual([]);
    expect(completed).toBe(jobs);
    const attempts = await engine.database.rows<{ n: number; runs: number }>(sql`
      SELECT count(*)::int AS n, count(DISTINCT run_id)::int AS runs FROM ${engine.names.attempts}`);
    expect(attempts).toEqual([{ n: jobs, runs: jobs }]); // each job granted exactly once
    for (const run of runs.slice(0, 20))
      expect((await stepOfRun(engine, run.runId)).status).toBe('completed');
    expect(await engine.database.rows(sql`SELECT 1 FROM ${engine.names.ready}`)).toEqual([]);
  });
});
