import { sql } from 'drizzle-orm';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import type { PGlite } from '@electric-sql/pglite';
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import { createEngine, type CreateEngineOptions, type Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, runOf, stepsReach } from './workflow-rows.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, workerFor } from '../support/worker.js';
import { testPglite } from '../support/pglite.js';

function fixture() {
  const executedBy: string[] = [];
  const where = defineActivity({
    name: 'where',
    input: z.object({ tag: z.string() }),
    output: z.string(),
    run({ tag }, ctx) {
      executedBy.push(`${tag}@${ctx.info.workerId}`);
      return Promise.resolve(`${tag}@${ctx.info.workerId}`);
    },
  });
  const trip = defineWorkflow({
    name: 'trip',
    input: z.object({ tag: z.string() }),
    output: z.string(),
    async run(input, ctx) {
      const first = await ctx.run(where, input);
      await ctx.sleep('1m');
      return first;
    },
  });
  return { executedBy, where, trip };
}

/** Start a `trip` run, let its timer fire by time travel, and return its output. */
async function runTrip(engine: Engine, workerId: string, tag: string): Promise<string> {
  const { where, trip } = fixture();
  const worker = await startWorker(engine, [trip, where], { workerId, pollIntervalMs: 50 });
  const handle = await engine.client.start(trip, { tag }, { key: 'same-key' });
  await stepsReach([worker], engine, handle.runId, (steps) => steps[1]?.kind === 'timer', 'asleep');
  await advanceClock(engine, 60_000);
  const output = await handle.result({ timeoutMs: 15_000 });
  await worker.stop();
  return output;
}

function resourceCounts(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const type of process.getActiveResourcesInfo()) counts[type] = (counts[type] ?? 0) + 1;
  return counts;
}

/**
 * The counts once no type exceeds `baseline`, or after 2 s. postgres.js ends its LISTEN connection with
 * `timeout: 0` and resolves `end()` before that socket's close event: a socket already being torn down is not a
 * leak, so it gets a bounded moment to finish closing. A leaked timer or open socket still fails.
 */
async function settledCounts(baseline: Record<string, number>): Promise<Record<string, number>> {
  const deadline = performance.now() + 2_000;
  for (;;) {
    const counts = resourceCounts();
    const settled = Object.entries(counts).every(([type, count]) => count <= (baseline[type] ?? 0));
    if (settled || performance.now() > deadline) return counts;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`hosting the engine on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });
    // The host application's own PGlite (starting one takes seconds: one per file).
    let hostPglite: PGlite | undefined;
    const hostPg = () => (hostPglite ??= testPglite());
    beforeAll(async () => {
      if (driver === 'pglite') await hostPg().waitReady;
    });
    afterAll(async () => {
      await hostPglite?.close();
    });

    it('runs two engines on two schemas side by side in one process without crossing over', async () => {
      const [a, b] = [await target.engine(), await target.engine()];
      expect(a.schema).not.toBe(b.schema);
      const { executedBy, where, trip } = fixture();
      const wa = workerFor(a, [trip, where], { workerId: 'worker-a', pollIntervalMs: 50 });
      const wb = workerFor(b, [trip, where], { workerId: 'worker-b', pollIntervalMs: 50 });
      await Promise.all([wa.start(), wb.start()]);
      // The same workflow name and idempotency key in each schema: two independent runs.
      const ha = await a.client.start(trip, { tag: 'A' }, { key: 'k' });
      const hb = await b.client.start(trip, { tag: 'B' }, { key: 'k' });
      expect(ha.runId).not.toBe(hb.runId);
      await stepsReach([wa, wb], a, ha.runId, (steps) => steps[1]?.kind === 'timer', 'A asleep');
      await stepsReach([wa, wb], b, hb.runId, (steps) => steps[1]?.kind === 'timer', 'B asleep');
      // Time travel is per schema: only A's timer falls due.
      await advanceClock(a, 60_000);
      await expect(ha.result({ timeoutMs: 15_000 })).resolves.toBe('A@worker-a');
      expect((await b.client.list()).map((r) => [r.id, r.status])).toEqual([[hb.runId, 'running']]);
      await advanceClock(b, 60_000);
      await expect(hb.result({ timeoutMs: 15_000 })).resolves.toBe('B@worker-b');
      expect(executedBy.sort()).toEqual(['A@worker-a', 'B@worker-b']);
      expect((await a.client.list()).map((r) => r.id)).toEqual([ha.runId]);
      await expect(a.client.getHandle(hb.runId).describe()).rejects.toMatchObject({ code: 'RUN_NOT_FOUND' });
      // Each schema has its own token sequence and its own attempts.
      expect((await attemptsOf(a, ha.runId)).every((x) => x.worker_id === 'worker-a')).toBe(true);
      expect((await attemptsOf(b, hb.runId)).every((x) => x.worker_id === 'worker-b')).toBe(true);
    });

    it('runs on the host’s own client and on its drizzle instance, and leaves both usable after close', async () => {
      let host: { client: CreateEngineOptions; query: () => Promise<unknown[]>; end: () => Promise<void> };
      let hostDrizzle: { client: CreateEngineOptions; query: () => Promise<unknown[]> };
      if (driver === 'postgres') {
        const client = postgres(target.url(), { max: 4, onnotice: () => undefined });
        const db = drizzlePostgres(client);
        host = {
          client: { sql: client },
          query: async () => [...(await client`SELECT 1 AS one`)],
          end: () => client.end({ timeout: 5 }),
        };
        hostDrizzle = { client: { db }, query: async () => db.execute(sql`SELECT 1 AS one`) };
      } else {
        const pg = hostPg();
        const db = drizzlePglite(pg);
        host = {
          client: { pglite: pg },
          query: async () => (await pg.query('SELECT 1 AS one')).rows,
          end: () => Promise.resolve(),
        };
        hostDrizzle = { client: { db }, query: async () => (await db.execute(sql`SELECT 1 AS one`)).rows };
      }
      try {
        for (const [label, options] of [
          ['client', host.client],
          ['drizzle', hostDrizzle.client],
        ] as const) {
          const engine = await createEngine({ ...options, schema: `host_${label}_${Date.now() % 100_000}` });
          try {
            await expect(runTrip(engine, `host-${label}`, label)).resolves.toBe(`${label}@host-${label}`);
          } finally {
            await engine.close();
          }
          // The engine closed only what it opened: the host's client still answers.
          await expect(host.query()).resolves.toHaveLength(1);
          await expect(hostDrizzle.query()).resolves.toHaveLength(1);
        }
      } finally {
        await host.end();
      }
    });

    it('leaves no timers, sockets or handles behind after worker.stop() and engine.close()', async () => {
      const before = resourceCounts();
      const engine = await createEngine(
        driver === 'postgres'
          ? { databaseUrl: target.url(), schema: `leak_${Date.now() % 100_000}` }
          : { pglite: hostPg(), schema: `leak_${Date.now() % 100_000}` },
      );
      let during: Record<string, number> = {};
      let waiting: Promise<unknown> = Promise.resolve();
      try {
        await expect(runTrip(engine, 'leaky', 'x')).resolves.toBe('x@leaky');
        // A second worker, running and asleep on a timer when the engine closes, is stopped by close(); so is a
        // result() still waiting for that run.
        const { where, trip } = fixture();
        const running = await startWorker(engine, [trip, where], { pollIntervalMs: 50 });
        const parked = await engine.client.start(trip, { tag: 'parked' }, { key: 'parked' });
        await stepsReach([running], engine, parked.runId, (steps) => steps[1]?.kind === 'timer', 'asleep');
        waiting = parked.result({ pollIntervalMs: 60_000 }).catch((e: unknown) => e);
        await checkOnEvents(
          [running],
          async () => (await runOf(engine, parked.runId)).status === 'running',
          'waiting',
        );
        during = resourceCounts();
      } finally {
        await engine.close();
      }
      await expect(waiting).resolves.toMatchObject({ code: 'ENGINE_CLOSED' });
      const after = await settledCounts(before);
      // The check can fail: while running, the engine held timers (and sockets on postgres) that close() ended.
      expect(during.Timeout ?? 0).toBeGreaterThan(after.Timeout ?? 0);
      if (driver === 'postgres') expect(during.TCPSocketWrap ?? 0).toBeGreaterThan(after.TCPSocketWrap ?? 0);
      // Resources other code in the process held before may have ended meanwhile; none may have been added.
      for (const [type, count] of Object.entries(after)) {
        expect({ type, count }).toEqual({ type, count: Math.min(count, before[type] ?? 0) });
      }
    });
  });
}
