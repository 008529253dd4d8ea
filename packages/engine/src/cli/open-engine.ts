/**
 * Opening the engine a command works on, from the global options. Commands import this module lazily (inside
 * their action), so that `--help` and usage errors do not load the database drivers.
 * @module
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { sql } from 'drizzle-orm';
import { InvalidOptionsError, PalisadeError } from '@palisade/sdk';
import {
  ENGINE_DEFAULTS,
  createEngine,
  resolveSchemaName,
  loadMigrations,
  type CreateEngineOptions,
  type Engine,
} from '../index.js';
import { redactUrl } from './format.js';
import type { GlobalOptions } from './output.js';

export { loadMigrations };

/** The database a command works on, with the engine's defaults filled in. */
export interface Target {
  readonly databaseUrl?: string | undefined;
  readonly dataDir: string;
  readonly schema: string;
  /** The flag or variable each option came from, to name it when it is refused (`--data-dir`, `DATABASE_URL`…). */
  readonly from?: { readonly [option: string]: string };
}

export function resolveTarget(g: GlobalOptions): Target {
  return {
    from: {
      databaseUrl: g.databaseUrlFrom ?? '--database-url',
      dataDir: '--data-dir',
      schema: g.schemaFrom ?? '--schema',
    },
    databaseUrl: g.databaseUrl,
    dataDir: g.dataDir ?? ENGINE_DEFAULTS.dataDir,
    // commander already read PALISADE_SCHEMA into --schema; the rule is createEngine's all the same.
    schema: resolveSchemaName(g.schema).schema,
  };
}

/** Where the database is, for messages: the URL without its password, or the embedded directory. */
export function describeDatabase(t: Target): string {
  return t.databaseUrl !== undefined ? redactUrl(t.databaseUrl) : `embedded ${resolve(t.dataDir)}`;
}

/** What a command does with the database; decides whether it may create or migrate it. */
export type EnginePurpose =
  /** Reads or changes runs: the schema must exist and be up to date; nothing is created. */
  | 'runs'
  /** `migrate`: creates the embedded database if needed; the command applies migrations itself. */
  | 'migrate'
  /** `worker`: like any engine user, applies pending migrations at start. */
  | 'worker';

/**
 * Open an engine on the database `t` names.
 * @throws PalisadeError `INVALID_OPTIONS` when a `runs` command finds no embedded database or a schema that is
 * missing or behind (the message says to run `palisade migrate`); whatever `createEngine` throws.
 */
export async function openEngine(t: Target, purpose: EnginePurpose): Promise<Engine> {
  if (
    purpose === 'runs' &&
    t.databaseUrl === undefined &&
    t.dataDir !== 'memory://' &&
    !existsSync(t.dataDir)
  ) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `no embedded database at ${resolve(t.dataDir)}. Run \`palisade migrate\` to create one there, or ` +
        'point at PostgreSQL with --database-url (or DATABASE_URL).',
    );
  }
  const options: CreateEngineOptions = {
    ...(t.databaseUrl !== undefined ? { databaseUrl: t.databaseUrl } : { dataDir: t.dataDir }),
    schema: t.schema,
    migrate: purpose === 'worker',
    ...(purpose === 'worker' ? {} : { poolSize: 2 }),
  };
  const engine = await createEngine(options).catch((error: unknown) => {
    throw namedAsGiven(error, t);
  });
  if (purpose === 'runs') {
    try {
      await ensureMigrated(engine, t);
    } catch (error) {
      await engine.close();
      throw error;
    }
  }
  return engine;
}

/**
 * An InvalidOptionsError of createEngine with its option names as the command line gave them: `--data-dir`, not
 * `dataDir`; `DATABASE_URL` when the URL came from the environment.
 */
function namedAsGiven(error: unknown, t: Target): unknown {
  if (!(error instanceof InvalidOptionsError) || t.from === undefined) return error;
  const from = t.from;
  return new InvalidOptionsError(
    'database options',
    error.issues.map((i) => ({ ...i, path: from[i.path] ?? i.path })),
  );
}

/** Refuse to read a schema that is missing or older than this code: its queries would fail obscurely. */
async function ensureMigrated(engine: Engine, t: Target): Promise<void> {
  const [row] = await engine.database.rows<{ present: boolean }>(sql`
    SELECT EXISTS (SELECT 1 FROM information_schema.tables
                    WHERE table_schema = ${engine.schema} AND table_name = 'migrations') AS present`);
  const known = (await loadMigrations()).length;
  let applied = 0;
  if (row?.present) {
    // The schema name passed createEngine's identifier check, so quoting it here is safe.
    const [count] = await engine.database.rows<{ n: number }>(
      sql.raw(`SELECT count(*)::int AS n FROM "${engine.schema}"."migrations"`),
    );
    applied = count?.n ?? 0;
  }
  if (applied < known) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `${applied === 0 ? `no Palisade schema ${t.schema}` : `schema ${t.schema} is at migration ${applied} of ${known}`}` +
        ` in ${describeDatabase(t)}. Run \`palisade migrate\` with the same --database-url/--data-dir and --schema.`,
    );
  }
}

/** Run `fn` with an engine for `purpose`, closing it afterwards whatever happens. */
export async function withEngine<T>(
  t: Target,
  purpose: EnginePurpose,
  fn: (engine: Engine) => Promise<T>,
): Promise<T> {
  const engine = await openEngine(t, purpose);
  try {
    return await fn(engine);
  } finally {
    await engine.close();
  }
}
