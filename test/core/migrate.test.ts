/**
 * Migrations (DESIGN.md §3): applied under an advisory lock, so many processes starting at once on a fresh
 * schema apply each migration exactly once, recorded in the same transaction as its DDL; applying again changes
 * nothing; a schema migrated by a newer Palisade is refused (SCHEMA_TOO_NEW) without any change; and every
 * object lives in the configured schema.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { sql } from 'drizzle-orm';
import type postgres from '@palisade/engine/postgres';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { PalisadeError } from '@palisade/sdk';
import { createEngine, loadMigrations, migrate } from '@palisade/engine';
import { advanceClock, databaseNow } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { rejectionOf } from '../support/rejections.js';
import { startWorker } from '../support/worker.js';
import { echoActivity } from '../fixtures/pure-activity.js';

const MIGRATORS = 10;
const MIGRATOR_MAIN = fileURLToPath(new URL('../fixtures/migrator-main.ts', import.meta.url));
const TEST_ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Advisory-lock class of this file's start barrier (two-int form: apart from the migrator's own lock). */
const BARRIER_CLASS = 0x4d49_47;

/**
 * tsx is a devDependency of the workspace root, so it resolves from here in any installed clone; handing its
 * loader to `node --import` as a file URL makes the child independent of its working directory.
 */
const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

interface MigratorResult {
  code: number | null;
  output: { applied?: string[]; version?: number; error?: { code: string; message: string } };
  stderr: string;
}

function runMigrator(databaseUrl: string, schema: string, barrier: string): Promise<MigratorResult> {
  const child = spawn(
    process.execPath,
    ['--conditions=@palisade/source', '--import', tsxLoader, MIGRATOR_MAIN, databaseUrl, schema, barrier],
    {
      cwd: TEST_ROOT,
      env: { ...process.env, PALISADE_LOG_LEVEL: 'error' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      const line = stdout.trim().split('\n').at(-1) ?? '';
      let output: MigratorResult['output'] = {};
      try {
        output = JSON.parse(line) as MigratorResult['output'];
      } catch {
        output = { error: { code: 'NO_OUTPUT', message: stdout } };
      }
      resolve({ code, output, stderr });
    });
  });
}

/** Every object of `schema` the migrations create, described as text: columns, indexes, functions, triggers. */
async function catalog(admin: postgres.Sql, schema: string): Promise<string[]> {
  const rows = await admin<{ item: string }[]>`
    SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
           || ' ' || coalesce(column_default, '') AS item
      FROM information_schema.columns WHERE table_schema = ${schema}
    UNION ALL
    SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = ${schema}
    UNION ALL
    SELECT 'function ' || p.proname || ' ' || md5(p.prosrc)
      FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace WHERE ns.nspname = ${schema}
    UNION ALL
    SELECT 'trigger ' || t.tgname || ' on ' || c.relname
      FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace ns ON ns.oid = c.relnamespace
     WHERE ns.nspname = ${schema} AND NOT t.tgisinternal
    UNION ALL
    SELECT 'sequence ' || sequencename FROM pg_sequences WHERE schemaname = ${schema}
    ORDER BY 1`;
  return rows.map((r) => r.item);
}

async function migrationRows(admin: postgres.Sql, schema: string) {
  return admin<{ id: number; name: string; hash: string }[]>`
    SELECT id, name, hash FROM ${admin(schema)}.migrations ORDER BY id`;
}

function freshSchema(): string {
  return `m_${randomBytes(5).toString('hex')}`;
}

describe('migrations on postgres', () => {
  const target = useEngineTarget('postgres');

  // Ten Node processes each load the engine from source (tsx): on a busy two-core machine that alone takes a while.
  it(
    `applies every migration exactly once when ${MIGRATORS} processes migrate a fresh schema at once`,
    { timeout: 180_000 },
    async () => {
      const admin = target.sql();
      const schema = freshSchema();
      const key = Math.floor(Math.random() * 1_000_000);
      const holder = await admin.reserve();
      let results: MigratorResult[];
      try {
        await holder`SELECT pg_advisory_lock(${BARRIER_CLASS}::int, ${key}::int)`;
        const migrators = Array.from({ length: MIGRATORS }, () =>
          runMigrator(target.url(), schema, `${BARRIER_CLASS}:${key}`),
        );
        let exited = false;
        void Promise.all(migrators).finally(() => (exited = true));
        // Release them together once all ten are waiting at the barrier (or report what went wrong).
        for (;;) {
          const [row] = await holder<{ waiting: number }[]>`
          SELECT count(*)::int AS waiting FROM pg_locks
           WHERE locktype = 'advisory' AND classid = ${BARRIER_CLASS} AND objid = ${key} AND objsubid = 2
             AND NOT granted`;
          if ((row?.waiting ?? 0) >= MIGRATORS || exited) break;
        }
        await holder`SELECT pg_advisory_unlock(${BARRIER_CLASS}::int, ${key}::int)`;
        results = await Promise.all(migrators);
      } finally {
        holder.release();
      }

      const migrations = await loadMigrations();
      expect(results.map((r) => [r.code, r.output.error ?? null, r.stderr])).toEqual(
        results.map(() => [0, null, '']),
      );
      // Between them they applied each migration once; every one ends at the latest version.
      expect(results.flatMap((r) => r.output.applied ?? []).sort()).toEqual(
        migrations.map((m) => m.name).sort(),
      );
      expect(results.map((r) => r.output.version)).toEqual(results.map(() => migrations.length));
      expect(await migrationRows(admin, schema)).toEqual(
        migrations.map((m) => ({ id: m.id, name: m.name, hash: m.hash })),
      );
      const tables = await admin<{ name: string }[]>`
      SELECT table_name AS name FROM information_schema.tables WHERE table_schema = ${schema} ORDER BY 1`;
      expect(tables.map((t) => t.name)).toEqual(
        expect.arrayContaining([
          'attempt_records',
          'attempts',
          'clock_offset',
          'events',
          'fences',
          'migrations',
          'runs',
          'steps',
        ]),
      );
    },
  );

  it('applies nothing and changes nothing when migrating an up-to-date schema again', async () => {
    const admin = target.sql();
    const engine = await target.engine({ schema: freshSchema() });
    const before = await catalog(admin, engine.schema);
    const recorded = await migrationRows(admin, engine.schema);

    const again = await engine.migrate();

    expect(again).toEqual({ applied: [], version: (await loadMigrations()).length });
    expect(await catalog(admin, engine.schema)).toEqual(before);
    expect(await migrationRows(admin, engine.schema)).toEqual(recorded);
  });

  it('refuses to open a schema migrated by a newer Palisade, with SCHEMA_TOO_NEW, and changes nothing', async () => {
    const admin = target.sql();
    const schema = freshSchema();
    // A schema at the first migration that also records one this version does not know.
    const opener = await target.engine({ schema, migrate: false });
    const [first] = await loadMigrations();
    await migrate(opener.database, schema, first ? [first] : []);
    await admin`INSERT INTO ${admin(schema)}.migrations (id, name, hash) VALUES (999, '0998_from_the_future', 'f')`;
    const before = await catalog(admin, schema);
    const recorded = await migrationRows(admin, schema);

    const error = await rejectionOf(createEngine({ databaseUrl: target.url(), schema }));

    expect(error).toBeInstanceOf(PalisadeError);
    expect((error as PalisadeError).code).toBe('SCHEMA_TOO_NEW');
    expect((error as PalisadeError).message).toMatch(/migration 999 "0998_from_the_future"/);
    // The pending migrations of this version were not applied either.
    expect(await catalog(admin, schema)).toEqual(before);
    expect(await migrationRows(admin, schema)).toEqual(recorded);
  });

  it('refuses a schema whose applied migration was edited since, with SCHEMA_TOO_NEW', async () => {
    const admin = target.sql();
    const engine = await target.engine({ schema: freshSchema() });
    await admin`UPDATE ${admin(engine.schema)}.migrations SET hash = 'edited' WHERE id = 1`;

    const error = await rejectionOf(engine.migrate());

    expect((error as PalisadeError).code).toBe('SCHEMA_TOO_NEW');
    expect((error as PalisadeError).message).toMatch(/migration 1 .* different file/);
  });

  it('keeps every table, function and sequence in a custom schema and works there', async () => {
    const admin = target.sql();
    const schema = 'custom_engine';
    const engine = await target.engine({ schema });

    expect(engine.schema).toBe(schema);
    const [palisade] = await admin<{ exists: boolean }[]>`
      SELECT to_regnamespace('palisade') IS NOT NULL AS exists`;
    expect(palisade?.exists).toBe(false);
    // Function bodies were rewritten for the schema too: none still names the default one.
    const bodies = await admin<{ name: string; src: string }[]>`
      SELECT p.proname AS name, p.prosrc AS src FROM pg_proc p JOIN pg_namespace ns ON ns.oid = p.pronamespace
       WHERE ns.nspname = ${schema}`;
    expect(bodies.map((b) => b.name)).toEqual(expect.arrayContaining(['now', 'guard_monotonic_tokens']));
    expect(bodies.filter((b) => b.src.includes('palisade'))).toEqual([]);
    // Time travel reads the custom schema's clock_offset through its own now().
    const before = await databaseNow(engine);
    await advanceClock(engine, 3_600_000);
    expect((await databaseNow(engine)).getTime() - before.getTime()).toBeGreaterThanOrEqual(3_600_000);

    const echo = echoActivity('echo', z.object({ n: z.number() }));
    await startWorker(engine, [echo]);
    const run = await engine.client.enqueue(echo, { n: 7 });
    await expect(run.result({ timeoutMs: 10_000, pollIntervalMs: 100 })).resolves.toEqual({ n: 7 });
    const [counts] = await engine.database.rows<{ attempts: number; tokens: string }>(sql`
      SELECT (SELECT count(*)::int FROM ${engine.names.attempts}) AS attempts,
             (SELECT last_value::text FROM ${sql.raw(`"${schema}"."fencing_token_seq"`)}) AS tokens`);
    expect(counts).toEqual({ attempts: 1, tokens: '1' });
  });
});
