/**
 * The worker's upkeep of planner statistics where autovacuum is off (STORAGE.md, "The held horizon, read again").
 * postgres.js prepares every statement and the server keeps a generic plan after five executions, costed with the
 * statistics of that moment: made while `runs` and `steps` were empty, the completion's plan joined them by
 * sequential scans, and nothing replaced it while autovacuum was off — throughput collapsed as the tables grew.
 * What must hold: a worker analyzes the engine's tables once they changed by more than 50 rows plus their row
 * estimate, when autovacuum is off for them (set per table here, so the case does not depend on the server's
 * setting), and not again until they change that much more. PostgreSQL only: PGlite plans each statement anew.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { Engine } from '@palisade/engine';
import { analyzeStaleTables } from '@palisade/engine/testing/internals';
import { nextEvent, useEngineTarget } from '../support/engine.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const job = emptyActivity('statistics-job');
const other = emptyActivity('statistics-other');

/** Turn autovacuum off for every table of the engine's schema. */
async function autovacuumOff(engine: Engine): Promise<void> {
  const tables = await engine.database.rows<{ name: string }>(
    sql`SELECT s.relname AS name FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
         WHERE schemaname = ${engine.names.schema} AND c.relkind = 'r'`,
  );
  for (const { name } of tables)
    await engine.database.rows(
      sql.raw(`ALTER TABLE "${engine.names.schema}"."${name}" SET (autovacuum_enabled = false)`),
    );
}

/** Manual analyzes counted per table of the schema. */
async function analyzeCounts(engine: Engine): Promise<Record<string, number>> {
  const rows = await engine.database.rows<{ name: string; n: number }>(
    sql`SELECT relname AS name, analyze_count::int AS n FROM pg_stat_user_tables
         WHERE schemaname = ${engine.names.schema}`,
  );
  return Object.fromEntries(rows.map((r) => [r.name, r.n]));
}

/** Wait until the statistics system shows at least `rows` changes of `table` since its last analyze. */
async function changedRowsShown(engine: Engine, table: string, rows: number): Promise<void> {
  await expect
    .poll(
      async () => {
        const [row] = await engine.database.rows<{ n: number }>(
          sql`SELECT n_mod_since_analyze::int AS n FROM pg_stat_user_tables
               WHERE schemaname = ${engine.names.schema} AND relname = ${table}`,
        );
        return row?.n ?? 0;
      },
      { timeout: 5_000 },
    )
    .toBeGreaterThanOrEqual(rows);
}

describe('planner statistics where autovacuum is off', () => {
  const target = useEngineTarget('postgres');

  it('a worker analyzes runs and steps at start once they changed past the threshold, then not until they change again', async () => {
    const engine = await target.engine();
    await autovacuumOff(engine);
    expect((await analyzeCounts(engine)).runs).toBe(0);
    // 200 jobs: each inserts a run and a step, far past the threshold of 50 changed rows.
    await engine.client.enqueueMany(
      job,
      Array.from({ length: 200 }, () => ({})),
    );
    await changedRowsShown(engine, 'steps', 200);
    // Its first check is at start, before its connections have planned much (the worker runs none of the jobs, so
    // what follows counts only the changes the test makes).
    const worker = engine.worker({ activities: [other], concurrency: 1 });
    const analyzed = nextEvent<{ tables: string[] }>(worker.events, 'tables:analyzed');
    await worker.start();
    expect((await analyzed).tables).toEqual(expect.arrayContaining(['runs', 'steps']));
    await worker.stop();
    // Counted by the statistics system at the analyzing session's next report; read until it shows.
    await expect.poll(async () => (await analyzeCounts(engine)).steps, { timeout: 5_000 }).toBeGreaterThan(0);
    expect((await analyzeCounts(engine)).runs).toBeGreaterThan(0);
    // Nothing changed since: nothing is due.
    expect(await analyzeStaleTables(engine.database, engine.names)).toEqual([]);

    // 300 more jobs: past 50 + the 200 rows the analyze counted (the table more than doubled).
    await engine.client.enqueueMany(
      job,
      Array.from({ length: 300 }, () => ({})),
    );
    await changedRowsShown(engine, 'steps', 300);
    expect(await analyzeStaleTables(engine.database, engine.names)).toEqual(
      expect.arrayContaining(['runs', 'steps']),
    );
  });

  it('leaves tables alone while autovacuum keeps them', async () => {
    const engine = await target.engine();
    const [setting] = await engine.database.rows<{ on: boolean }>(
      sql`SELECT current_setting('autovacuum')::boolean AS on`,
    );
    await engine.client.enqueueMany(
      job,
      Array.from({ length: 200 }, () => ({})),
    );
    // Changed past the threshold (50 rows on empty tables), autovacuum enabled per table (the default): analyzed
    // only if the server's autovacuum is off.
    await changedRowsShown(engine, 'steps', 200);
    const tables = await analyzeStaleTables(engine.database, engine.names);
    if (setting?.on) expect(tables).toEqual([]);
    else expect(tables).toEqual(expect.arrayContaining(['runs', 'steps']));
  });
});
