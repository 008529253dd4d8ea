/**
 * `pnpm demo` never touches a schema it did not create: on PostgreSQL it runs in a fresh `palisade_demo_<random>`
 * schema (the examples move that schema's database clock two days forward) and drops its own schemas, and only
 * those, at the end or on Ctrl-C; without DATABASE_URL it runs in memory. Its files (the transcoding example's)
 * go to a temporary directory of its own, which it removes.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import postgres from '@palisade/engine/postgres';
import { afterEach, expect, it } from 'vitest';
import { createEngine, type Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { demoTarget, dropDemoSchemas, makeDemoWorkDir, removeDemoWorkDir } from '@palisade/examples';
import { useTestDatabase } from '../support/postgres.js';

const url = useTestDatabase();
const opened: Engine[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((e) => e.close()));
});

async function schemas(): Promise<string[]> {
  const sql = postgres(url(), { max: 1, onnotice: () => undefined });
  try {
    const rows = await sql<{ nspname: string }[]>`
      SELECT nspname FROM pg_namespace WHERE nspname LIKE 'palisade%' ORDER BY 1`;
    return rows.map((r) => r.nspname);
  } finally {
    await sql.end({ timeout: 1 });
  }
}

it('runs the demo in a fresh schema of its own on DATABASE_URL, in memory without it', () => {
  const a = demoTarget({ DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/app' });
  const b = demoTarget({ DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/app' });
  expect(a.schema).toMatch(/^palisade_demo_[0-9a-f]{8}$/);
  expect(b.schema).not.toBe(a.schema);
  expect(a).toMatchObject({ databaseUrl: 'postgres://postgres@127.0.0.1:5432/app', keepSchema: false });
  expect(demoTarget({ DATABASE_URL: 'postgres://x@h/app', PALISADE_DEMO_KEEP: '1' }).keepSchema).toBe(true);
  const embedded = demoTarget({});
  expect(embedded.databaseUrl).toBeUndefined();
  expect(Object.keys(embedded)).not.toContain('dataDir');
  expect([embedded.keepSchema, embedded.keepFiles]).toEqual([false, false]);
  expect(demoTarget({ PALISADE_DEMO_KEEP: '1' }).keepFiles).toBe(true);
});

it('writes its files in a temporary directory of its own, which it removes, and refuses to remove any other', async () => {
  const dir = await makeDemoWorkDir();
  expect(dirname(dir)).toBe(resolve(tmpdir()));
  expect(basename(dir)).toMatch(/^palisade-demo-/);
  await writeFile(join(dir, 'clip.mp4'), 'x');
  await removeDemoWorkDir(dir);
  expect(existsSync(dir)).toBe(false);
  const other = await mkdtemp(join(tmpdir(), 'not-the-demo-'));
  try {
    await expect(removeDemoWorkDir(other)).rejects.toThrow(/removes only the directory it made/);
    await expect(removeDemoWorkDir(process.cwd())).rejects.toThrow(/removes only the directory it made/);
    expect(existsSync(other)).toBe(true);
  } finally {
    await rm(other, { recursive: true, force: true });
  }
});

it('leaves the application’s schema and clock alone, and drops only its own schemas', async () => {
  // The application: schema palisade on the same database, its clock not moved.
  const app = await createEngine({ databaseUrl: url(), schema: 'palisade' });
  opened.push(app);
  const target = demoTarget({ DATABASE_URL: url() });
  const other = demoTarget({ DATABASE_URL: url() });
  const demo = await createEngine({ databaseUrl: url(), schema: target.schema });
  const otherDemo = await createEngine({ databaseUrl: url(), schema: other.schema });
  opened.push(demo, otherDemo);
  const sql = postgres(url(), { max: 1, onnotice: () => undefined });
  try {
    await sql.unsafe(`CREATE SCHEMA ${target.schema}_support`);
    // What the support agent example does, and leaves so if the demo is killed: two days and a minute forward.
    await advanceClock(demo, 2 * 86_400_000 + 60_000);
    expect(await dropDemoSchemas(url(), target.schema)).toEqual(
      [target.schema, `${target.schema}_support`].sort(),
    );
    expect(await schemas()).toEqual(['palisade', other.schema].sort());
    const [offset] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM palisade.clock_offset`;
    expect(offset?.n).toBe(0);
    await expect(dropDemoSchemas(url(), 'palisade')).rejects.toThrow(/drops only the schemas it created/);
    expect(await schemas()).toContain('palisade');
  } finally {
    await sql.end({ timeout: 1 });
  }
});
