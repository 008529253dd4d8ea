/**
 * Where `pnpm demo` runs: never in a schema it did not create. The examples move the database clock forward (two
 * days for the support agent's approval timeout) and a clock belongs to a schema: run in the application's schema
 * `palisade`, the demo made that application's timers and leases jump, and left them so when it was killed. So on
 * PostgreSQL the demo makes a schema of its own, `palisade_demo_<random>` (and the examples' `<it>_*` beside
 * it), drops them at the end and on SIGINT/SIGTERM; on the embedded database it runs in memory. The one thing it
 * writes to disk, the transcoding example's files (ffmpeg works on files), goes to a temporary directory of its
 * own, removed the same way.
 * @module
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import postgres from '@palisade/engine/postgres';

/** Where the demo runs. */
export interface DemoTarget {
  /** The PostgreSQL server of DATABASE_URL, or undefined: an in-memory embedded database. */
  readonly databaseUrl?: string;
  /** The engine schema, the demo's own: `palisade_demo_<8 hex digits>`. */
  readonly schema: string;
  /** Whether the schemas stay after the run (`PALISADE_DEMO_KEEP=1`, PostgreSQL only); dropped otherwise. */
  readonly keepSchema: boolean;
  /** Whether the demo's files (its {@link makeDemoWorkDir}) stay after the run (`PALISADE_DEMO_KEEP=1`). */
  readonly keepFiles: boolean;
}

/** Prefix of every schema the demo creates. */
export const DEMO_SCHEMA_PREFIX = 'palisade_demo_';

/** A fresh target for one `pnpm demo`, from the environment (`DATABASE_URL`, `PALISADE_DEMO_KEEP`). */
export function demoTarget(env: NodeJS.ProcessEnv = process.env): DemoTarget {
  const databaseUrl = env.DATABASE_URL || undefined;
  return {
    ...(databaseUrl ? { databaseUrl } : {}),
    schema: `${DEMO_SCHEMA_PREFIX}${randomBytes(4).toString('hex')}`,
    keepSchema: databaseUrl !== undefined && env.PALISADE_DEMO_KEEP === '1',
    keepFiles: env.PALISADE_DEMO_KEEP === '1',
  };
}

/** Prefix of the temporary directory the demo writes its files in. */
export const DEMO_DIR_PREFIX = 'palisade-demo-';

/**
 * A fresh directory for the files of one `pnpm demo` (the transcoding example's clip, segments and outputs):
 * `<os temp dir>/palisade-demo-<random>`, never under the working directory.
 */
export function makeDemoWorkDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), DEMO_DIR_PREFIX));
}

/** Remove a directory {@link makeDemoWorkDir} made, and refuse any other. */
export async function removeDemoWorkDir(dir: string): Promise<void> {
  const path = resolve(dir);
  if (dirname(path) !== resolve(tmpdir()) || !basename(path).startsWith(DEMO_DIR_PREFIX)) {
    throw new Error(
      `refusing to remove ${dir}: the demo removes only the directory it made (${DEMO_DIR_PREFIX}…)`,
    );
  }
  await rm(path, { recursive: true, force: true });
}

/**
 * Drop the schemas of one demo run on `databaseUrl`: `schema` and the examples' `<schema>_…` beside it, and none
 * other (a name is matched whole or with its `_` separator, never as a prefix of another demo's).
 * @returns the schemas dropped.
 */
export async function dropDemoSchemas(databaseUrl: string, schema: string): Promise<string[]> {
  if (!schema.startsWith(DEMO_SCHEMA_PREFIX)) {
    throw new Error(
      `refusing to drop ${schema}: the demo drops only the schemas it created (${DEMO_SCHEMA_PREFIX}…)`,
    );
  }
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => undefined });
  try {
    const rows = await sql<{ nspname: string }[]>`
      SELECT nspname FROM pg_namespace
       WHERE nspname = ${schema} OR left(nspname, ${schema.length + 1}) = ${`${schema}_`}`;
    for (const { nspname } of rows) {
      await sql.unsafe(`DROP SCHEMA IF EXISTS "${nspname.replace(/"/g, '""')}" CASCADE`);
    }
    return rows.map((r) => r.nspname);
  } finally {
    await sql.end({ timeout: 1 });
  }
}
