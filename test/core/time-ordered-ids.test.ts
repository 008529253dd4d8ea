/**
 * Time-ordered ids (issue 28 item 5; STORAGE.md §3.9): every key the engine or the database makes is a UUIDv7, so
 * new keys land in the rightmost leaves of their indexes. `<schema>.uuid7()` (migration 0022) carries the clock it
 * read in its first 60 bits (48 of milliseconds, 12 of the millisecond's fraction) and is the default of the run
 * and step ids, under the configured schema's name; the engine's own ids (runs it starts, children, schedule
 * runs, signal request ids) come from `turn/uuid7.ts`, unit-tested beside it.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSignal, defineWorkflow } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { startWorker } from '../support/worker.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const FORMAT = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const bits = (id: string): bigint => BigInt(`0x${id.replace(/-/g, '')}`);
/** Milliseconds since the epoch, from the id's first 48 bits. */
const msOf = (id: string): number => Number(bits(id) >> 80n);
/** The id's first 64 bits without the version: 48 bits of milliseconds, then 12 (clock fraction or counter). */
const clockBitsOf = (id: string): bigint => ((bits(id) >> 80n) << 12n) | ((bits(id) >> 64n) & 0xfffn);
/** A time in microseconds since the epoch, as `uuid7()` encodes it in its first 60 bits. */
const encodeMicros = (us: bigint): bigint => ((us / 1000n) << 12n) | (((us % 1000n) * 4096n) / 1000n);

const double = pureActivity('ids-double', z.number(), z.number(), (n) => n * 2);
const release = defineSignal({ name: 'ids-release', payload: z.number() });
const child = defineWorkflow({
  name: 'ids-child',
  input: z.number(),
  output: z.number(),
  run: (n, ctx) => ctx.run(double, n),
});
const parent = defineWorkflow({
  name: 'ids-parent',
  input: z.number(),
  output: z.number(),
  async run(n, ctx) {
    const extra = await ctx.waitForSignal(release);
    return ctx.runChild(child, n + extra);
  },
});

async function rows<T>(engine: Engine, query: ReturnType<typeof sql>): Promise<T[]> {
  return engine.database.rows<T>(query);
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`time-ordered ids on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('uuid7() writes version 7 and the variant, and the clock_timestamp() it read in its first 60 bits', async () => {
      const engine = await target.engine();
      const s = sql.raw(`"${engine.schema}"`);
      // clock_timestamp() before and after each id, in microseconds; the select list is evaluated left to right.
      const made = await rows<{ before: string; id: string; after: string; ord: number }>(
        engine,
        sql`SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS before, ${s}.uuid7()::text AS id,
                   (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS after, ord::int
              FROM generate_series(1, 2000) AS ord ORDER BY ord`,
      );
      for (const { before, id, after } of made) {
        expect(id).toMatch(FORMAT);
        expect(encodeMicros(BigInt(before)) <= clockBitsOf(id)).toBe(true);
        expect(clockBitsOf(id) <= encodeMicros(BigInt(after))).toBe(true);
      }
      // In the order made: never back by the clock; random bits decide only between ids of one microsecond.
      for (let k = 1; k < made.length; k++) {
        expect(clockBitsOf(made[k]!.id) >= clockBitsOf(made[k - 1]!.id)).toBe(true);
      }
      // And across statements, as the database compares uuids: a later statement's id is greater.
      const [a] = await rows<{ id: string }>(engine, sql`SELECT ${s}.uuid7()::text AS id`);
      const [b] = await rows<{ later: boolean }>(
        engine,
        sql`SELECT pg_sleep(0.002), ${s}.uuid7() > ${a!.id}::uuid AS later`,
      );
      expect(b!.later).toBe(true);
    });

    it('is the default of the run and step ids, under the schema the engine was given', async () => {
      const engine = await target.engine({ schema: `ids_${Math.random().toString(36).slice(2, 8)}` });
      const defaults = await rows<{ table_name: string; column_default: string }>(
        engine,
        sql`SELECT table_name::text, column_default::text FROM information_schema.columns
             WHERE table_schema = ${engine.schema} AND column_name = 'id' AND table_name IN ('runs', 'steps')
             ORDER BY table_name`,
      );
      expect(defaults).toEqual([
        { table_name: 'runs', column_default: `${engine.schema}.uuid7()` },
        { table_name: 'steps', column_default: `${engine.schema}.uuid7()` },
      ]);
    });

    it('makes every run, step and signal key of a job, a workflow, its child and a schedule a UUIDv7 of now', async () => {
      const engine = await target.engine();
      await startWorker(engine, [parent, child, double], { pollIntervalMs: 50 });
      const from = Date.now();
      const jobs = await engine.client.enqueueMany(
        double,
        Array.from({ length: 20 }, (_, k) => k),
      );
      const flow = await engine.client.signalWithStart(parent, 1, release, 2, { key: 'ids-order-1' });
      // The key finds the run (the partial key index and the inserts' ON CONFLICT), and the signal is stored again.
      const again = await engine.client.signalWithStart(parent, 1, release, 3, { key: 'ids-order-1' });
      expect([again.runId, again.created]).toEqual([flow.runId, false]);
      expect(await flow.result({ timeoutMs: 20_000 })).toBe(6);
      const schedule = await engine.schedules.create({
        id: 'ids-every-hour',
        everyMs: '1h',
        workflow: child,
        input: 5,
      });
      const ticked = engine.client.getHandle(await engine.schedules.trigger(schedule.id));
      expect(await ticked.result({ timeoutMs: 20_000 })).toBe(10);
      await Promise.all(jobs.map((j) => j.result({ timeoutMs: 20_000 })));
      const to = Date.now();

      // The ids one client makes sort in the order it made them.
      const jobIds = jobs.map((j) => j.runId);
      expect([...jobIds].sort()).toEqual(jobIds);
      const keys = await rows<{ what: string; id: string }>(
        engine,
        sql`SELECT 'run ' || kind || ' ' || name AS what, id::text FROM ${engine.names.runs}
            UNION ALL SELECT 'step ' || kind || ' ' || name, id::text FROM ${engine.names.steps}
            UNION ALL SELECT 'signal ' || name, request_id::text FROM ${engine.names.signals}`,
      );
      // 20 jobs; the parent, its child, the schedule's run; their steps; the two signals.
      expect(keys.filter((k) => k.what.startsWith('run '))).toHaveLength(23);
      expect(keys.filter((k) => k.what.startsWith('step '))).toHaveLength(20 + 2 + 1 + 1);
      expect(keys.filter((k) => k.what.startsWith('signal '))).toHaveLength(2);
      for (const { what, id } of keys) {
        expect(`${what} ${id}`).toMatch(new RegExp(`^${what} ${FORMAT.source.slice(1)}`));
        expect(msOf(id), `${what} ${id}`).toBeGreaterThanOrEqual(from - 1);
        expect(msOf(id), `${what} ${id}`).toBeLessThanOrEqual(to + 1);
      }
    });
  });
}
