import { sql } from 'drizzle-orm';
import type { Engine } from '../engine.js';

/**
 * Set the offset of the engine's time function `<schema>.now()`, in ms (test-only time travel): every lease and
 * due-time comparison reads that function, so moving it forward expires leases and makes retries due without
 * real waiting. Affects every connection to that schema at once. Never use in production.
 */
export async function setClockOffset(engine: Engine, offsetMs: number): Promise<void> {
  const n = engine.names;
  await engine.database.rows(sql`
    INSERT INTO ${n.clockOffset} (id, offset_ms) VALUES (true, ${Math.round(offsetMs)})
    ON CONFLICT (id) DO UPDATE SET offset_ms = EXCLUDED.offset_ms`);
}

/**
 * Move the engine's database clock forward by `ms` (test-only). `engine` may also be `{ names, database }` with a
 * transaction as `database`: the move then commits with it. @returns the new offset in ms.
 */
export async function advanceClock(engine: Pick<Engine, 'names' | 'database'>, ms: number): Promise<number> {
  const n = engine.names;
  const rows = await engine.database.rows<{ offset_ms: number }>(sql`
    INSERT INTO ${n.clockOffset} (id, offset_ms) VALUES (true, ${Math.round(ms)})
    ON CONFLICT (id) DO UPDATE SET offset_ms = ${n.clockOffset}.offset_ms + EXCLUDED.offset_ms
    RETURNING offset_ms::float8 AS offset_ms`);
  return Number(rows[0]?.offset_ms ?? ms);
}

/** Remove any time-travel offset (test-only). */
export async function resetClock(engine: Engine): Promise<void> {
  await engine.database.rows(sql`DELETE FROM ${engine.names.clockOffset}`);
}

/** The engine's database time (`<schema>.now()`), as a Date. */
export async function databaseNow(engine: Engine): Promise<Date> {
  const rows = await engine.database.rows<{ ms: number }>(
    sql`SELECT (extract(epoch FROM ${engine.names.now}) * 1000)::float8 AS ms`,
  );
  return new Date(rows[0]?.ms ?? NaN);
}
