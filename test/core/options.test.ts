/**
 * Parameters are checked at start (DESIGN.md §4 invariant 9; research I13): bad engine and worker options are
 * refused with InvalidOptionsError naming the field, before anything runs; tests may go below the production
 * lease floor only through `unsafeTestTimings()`.
 *
 * No database is needed: engine options are refused before any is opened, and worker options are checked when
 * the worker is made — here on an engine over a postgres.js client that never connects (it is never queried).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { InvalidOptionsError, defineActivity, type ActivityDefinition } from '@palisade/sdk';
import { createEngine, type Engine, type WorkerOptions } from '@palisade/engine';
import { unsafeTestTimings } from '@palisade/engine/testing';
import { rejectionOf } from '../support/rejections.js';

function activity(name: string, leaseMs: number): ActivityDefinition {
  return defineActivity({
    name,
    input: z.object({}),
    output: z.object({}),
    leaseMs,
    run() {
      return Promise.resolve({});
    },
  });
}

/** The error `fn` threw, which must be an InvalidOptionsError; its issue paths, and its message. */
function refusal(fn: () => unknown): { paths: string[]; message: string; code: string } {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown).toBeInstanceOf(InvalidOptionsError);
  const e = thrown as InvalidOptionsError;
  return { paths: e.issues.map((i) => i.path), message: e.message, code: e.code };
}

describe('engine options', () => {
  // Stand-ins for database handles (a PGlite never started): the options are refused before either is touched.
  const pglite = Object.create(PGlite.prototype) as PGlite;
  const client = postgres('postgres://127.0.0.1:1/never', { max: 1 });
  afterAll(() => client.end({ timeout: 0 }));

  async function engineRefusal(options: Parameters<typeof createEngine>[0]) {
    const error = await rejectionOf(createEngine(options));
    expect(error).toBeInstanceOf(InvalidOptionsError);
    const e = error as InvalidOptionsError;
    return { paths: e.issues.map((i) => i.path), message: e.message, code: e.code };
  }

  it('refuses two database options at once, naming both', async () => {
    const r = await engineRefusal({ databaseUrl: 'postgres://127.0.0.1:1/none', pglite });
    expect(r.code).toBe('INVALID_OPTIONS');
    expect(r.paths).toEqual(['pglite']);
    expect(r.message).toMatch(/give only one of databaseUrl, pglite/);
    const three = await engineRefusal({ databaseUrl: 'postgres://127.0.0.1:1/none', sql: client, pglite });
    expect(three.message).toMatch(/give only one of databaseUrl, sql, pglite/);
  });

  it.each([
    ['uppercase', 'Palisade'],
    ['a dash', 'my-schema'],
    ['a leading digit', '1st'],
    ['41 characters', 'a'.repeat(41)],
    ['a quote', 'x"; DROP SCHEMA public; --'],
  ])('refuses a schema name with %s', async (_, schema) => {
    const r = await engineRefusal({ pglite, schema });
    expect(r.paths).toEqual(['schema']);
    expect(r.message).toMatch(/schema: must be a lowercase identifier/);
  });

  it('refuses a database URL of another scheme, and a pool of one connection', async () => {
    const r = await engineRefusal({ databaseUrl: 'mysql://127.0.0.1/x', poolSize: 1 });
    expect(r.paths.sort()).toEqual(['databaseUrl', 'poolSize']);
    expect(r.message).toMatch(/poolSize: must be ≥ 2/);
  });

  it.each([
    [
      'a URL given as sql',
      () => ({ sql: 'postgres://postgres@127.0.0.1:1/app' }),
      'sql',
      /sql: must be a postgres\.js client .*give a connection URL as databaseUrl/,
    ],
    [
      'an object given as sql',
      () => ({ sql: {} }),
      'sql',
      /sql: must be a postgres\.js client .*got an object/,
    ],
    [
      'a directory given as pglite',
      () => ({ pglite: '.palisade/db' }),
      'pglite',
      /pglite: must be a PGlite instance .*give a directory as dataDir/,
    ],
    [
      'a postgres.js client given as pglite',
      () => ({ pglite: client }),
      'pglite',
      /pglite: must be a PGlite instance .*got a function/,
    ],
    ['a client given as db', () => ({ db: client }), 'db', /db: must be a drizzle database/],
    [
      'true given as logger',
      () => ({ pglite, logger: true }),
      'logger',
      /logger: must be a pino logger .*got a boolean/,
    ],
    [
      'a function given as logger',
      () => ({ pglite, logger: () => undefined }),
      'logger',
      /logger: must be a pino logger/,
    ],
  ] as const)('refuses %s, naming the option', async (_, given, path, message) => {
    const r = await engineRefusal(given() as unknown as Parameters<typeof createEngine>[0]);
    expect(r.code).toBe('INVALID_OPTIONS');
    expect(r.paths).toEqual([path]);
    expect(r.message).toMatch(message);
  });

  it.each([
    [
      'an out-of-range port',
      'postgres://app:hunter2@127.0.0.1:99999/app',
      /databaseUrl: has port 99999 out of range/,
    ],
    ['port 0', 'postgres://app:hunter2@127.0.0.1:0/app', /databaseUrl: has port 0 out of range/],
    [
      'a bad percent-encoding',
      'postgres://app:hunter2%zz@127.0.0.1/app',
      /databaseUrl: has a bad percent-encoding/,
    ],
    [
      'a port that is not a number',
      'postgres://app:hunter2@127.0.0.1:x5432/app',
      /databaseUrl: is not a valid URL/,
    ],
  ])('refuses a databaseUrl with %s, without repeating its password', async (_, databaseUrl, message) => {
    const r = await engineRefusal({ databaseUrl });
    expect(r.paths).toEqual(['databaseUrl']);
    expect(r.message).toMatch(message);
    expect(r.message).not.toContain('hunter2');
  });

  it('refuses a DATABASE_URL with an out-of-range port, naming the variable and not its password', async () => {
    const saved = process.env.DATABASE_URL;
    process.env.DATABASE_URL = 'postgres://app:hunter2@127.0.0.1:70000/app';
    try {
      const r = await engineRefusal({});
      expect(r.paths).toEqual(['DATABASE_URL']);
      expect(r.message).toMatch(/DATABASE_URL: has port 70000 out of range/);
      expect(r.message).not.toContain('hunter2');
    } finally {
      if (saved === undefined) delete process.env.DATABASE_URL;
      else process.env.DATABASE_URL = saved;
    }
  });

  it('takes the schema from PALISADE_SCHEMA when no schema option is given, and the option over it', async () => {
    const saved = process.env.PALISADE_SCHEMA;
    process.env.PALISADE_SCHEMA = 'from_env';
    try {
      const engine = await createEngine({ pglite, migrate: false });
      try {
        expect(engine.schema).toBe('from_env');
      } finally {
        await engine.close();
      }
      const explicit = await createEngine({ pglite, migrate: false, schema: 'from_option' });
      try {
        expect(explicit.schema).toBe('from_option');
      } finally {
        await explicit.close();
      }
      process.env.PALISADE_SCHEMA = 'Bad-Name';
      const r = await engineRefusal({ pglite });
      expect(r.paths).toEqual(['PALISADE_SCHEMA']);
      expect(r.message).toMatch(/PALISADE_SCHEMA: must be a lowercase identifier/);
    } finally {
      if (saved === undefined) delete process.env.PALISADE_SCHEMA;
      else process.env.PALISADE_SCHEMA = saved;
    }
  });

  it('refuses a dataDir that names a file, naming the option', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'palisade-opts-'));
    try {
      const file = join(dir, 'not-a-dir');
      await writeFile(file, 'x');
      const r = await engineRefusal({ dataDir: file });
      expect(r.paths).toEqual(['dataDir']);
      expect(r.message).toMatch(/dataDir: .*not-a-dir is a file, not a directory/);
      const under = await engineRefusal({ dataDir: join(file, 'db') });
      expect(under.paths).toEqual(['dataDir']);
      expect(under.message).toMatch(/is under a file, not a directory/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses an unknown option rather than ignoring it', async () => {
    const r = await engineRefusal({ pglite, leaseMs: 30_000 } as Parameters<typeof createEngine>[0]);
    expect(r.message).toMatch(/leaseMs/);
  });
});

describe('worker options', () => {
  const client = postgres('postgres://127.0.0.1:1/never', { max: 1 });
  let engine: Engine;
  beforeAll(async () => {
    engine = await createEngine({ sql: client, migrate: false });
  });
  afterAll(async () => {
    await engine.close();
    await client.end({ timeout: 0 });
  });
  const worker = (options: WorkerOptions) => () => engine.worker(options);

  it('refuses a lease shorter than 3 s and accepts exactly 3 s', () => {
    const r = refusal(worker({ activities: [activity('short', 2_999)] }));
    expect(r.paths).toContain('activities.short.leaseMs');
    expect(r.message).toMatch(/activities\.short\.leaseMs: must be ≥ 3000 ms, got 2999 ms/);
    expect(engine.worker({ activities: [activity('ok', 3_000)] }).options.heartbeatIntervalMs).toBe(1_000);
  });

  it('refuses a heartbeat interval above a third of a served lease', () => {
    const r = refusal(worker({ activities: [activity('a', 30_000)], heartbeatIntervalMs: 10_001 }));
    expect(r.paths).toEqual(['heartbeatIntervalMs']);
    expect(r.message).toMatch(/heartbeatIntervalMs: must be ≤ leaseMs \/ 3 of activity a \(10000 ms\)/);
    expect(() =>
      engine.worker({ activities: [activity('a', 30_000)], heartbeatIntervalMs: '10s' }),
    ).not.toThrow();
    // The shortest lease served decides.
    const two = refusal(
      worker({
        activities: [activity('long', 60_000), activity('brief', 6_000)],
        heartbeatIntervalMs: 3_000,
      }),
    );
    expect(two.message).toMatch(/of activity brief/);
  });

  it('refuses a heartbeat timeout above the heartbeat interval', () => {
    const r = refusal(
      worker({ activities: [activity('a', 30_000)], heartbeatIntervalMs: 1_000, heartbeatTimeoutMs: 1_001 }),
    );
    expect(r.paths).toEqual(['heartbeatTimeoutMs']);
    expect(r.message).toMatch(/heartbeatTimeoutMs: must be ≤ heartbeatIntervalMs \(1000 ms\), got 1001 ms/);
  });

  it('refuses a safety margin of a third of the lease or more, or of zero', () => {
    const r = refusal(worker({ activities: [activity('a', 30_000)], leaseSafetyMarginMs: 10_000 }));
    expect(r.paths).toEqual(['leaseSafetyMarginMs']);
    expect(r.message).toMatch(/leaseSafetyMarginMs: must be > 0 and < leaseMs \/ 3 of activity a/);
    expect(refusal(worker({ activities: [activity('a', 30_000)], leaseSafetyMarginMs: 0 })).paths).toEqual([
      'leaseSafetyMarginMs',
    ]);
    expect(() =>
      engine.worker({ activities: [activity('a', 30_000)], leaseSafetyMarginMs: 9_999 }),
    ).not.toThrow();
  });

  it('refuses two activities of the same name', () => {
    const r = refusal(worker({ activities: [activity('twin', 30_000), activity('twin', 60_000)] }));
    expect(r.paths).toEqual(['activities.1']);
    expect(r.message).toMatch(/activities\.1: activity name twin is served twice/);
  });

  it('names every violated rule at once', () => {
    const r = refusal(
      worker({
        activities: [activity('a', 1_000)],
        heartbeatIntervalMs: 2_000,
        heartbeatTimeoutMs: 3_000,
      }),
    );
    expect(r.paths.sort()).toEqual(
      ['activities.a.leaseMs', 'heartbeatIntervalMs', 'heartbeatTimeoutMs'].sort(),
    );
  });

  it('admits a 300 ms lease only through unsafeTestTimings(), with the other rules still enforced', () => {
    const fast = activity('fast', 300);
    expect(refusal(worker({ activities: [fast] })).paths).toContain('activities.fast.leaseMs');

    const w = engine.worker(unsafeTestTimings({ activities: [fast] }));
    expect([w.options.heartbeatIntervalMs, w.options.timings.get('fast')?.safetyMarginMs]).toEqual([100, 99]);

    expect(
      refusal(worker(unsafeTestTimings({ activities: [fast], heartbeatIntervalMs: 101 }))).paths,
    ).toEqual(['heartbeatIntervalMs']);
    expect(refusal(worker(unsafeTestTimings({ activities: [activity('tiny', 99)] }))).paths).toContain(
      'activities.tiny.leaseMs',
    );
  });
});
