/**
 * One configuration story: an explicit connection option, then DATABASE_URL, then the embedded database; the
 * engine says at start which database it uses (never a password); a database it cannot use fails with its own
 * code naming host and database.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import postgres from '@palisade/engine/postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '@palisade/engine';
import { useTestDatabase } from '../support/postgres.js';
import { palisadeRejectionOf } from '../support/rejections.js';

/** A pino logger at level info whose records are kept, parsed. */
function capturingLogger(): { logger: pino.Logger; records: Record<string, unknown>[] } {
  const records: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n'))
        if (line) records.push(JSON.parse(line) as never);
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), records };
}

function withUrl(url: string, change: (u: URL) => void): string {
  const u = new URL(url);
  change(u);
  return u.toString();
}

const opened: Engine[] = [];
const savedUrl = process.env.DATABASE_URL;
afterEach(async () => {
  for (const engine of opened.splice(0)) await engine.close();
  if (savedUrl === undefined) delete process.env.DATABASE_URL;
  else process.env.DATABASE_URL = savedUrl;
});

describe('which database createEngine() uses', () => {
  const url = useTestDatabase();

  it('uses DATABASE_URL when no connection option is given, and logs host and database without the password', async () => {
    const target = new URL(url());
    // A password the logs must not show: the server's own (the embedded test server has a random one), or, on a
    // trust-auth server, one it ignores.
    const secret = target.password || 's3cret-pw';
    process.env.DATABASE_URL = withUrl(url(), (u) => (u.password = secret));
    const { logger, records } = capturingLogger();
    const engine = await createEngine({ logger, schema: 'cfg_env' });
    opened.push(engine);
    expect(engine.database.driver).toBe('postgres');
    const start = records.find((r) => r.event === 'engine:database');
    expect(start).toMatchObject({
      database: 'postgres',
      at: `${target.hostname}:${target.port || '5432'}${target.pathname}`,
      from: 'DATABASE_URL',
      schema: 'cfg_env',
    });
    expect(JSON.stringify(records)).not.toContain(secret);
  });

  it('prefers an explicit databaseUrl over DATABASE_URL', async () => {
    process.env.DATABASE_URL = 'postgres://nobody@127.0.0.1:1/nowhere';
    const { logger, records } = capturingLogger();
    const engine = await createEngine({ databaseUrl: url(), logger, schema: 'cfg_explicit' });
    opened.push(engine);
    expect(records.find((r) => r.event === 'engine:database')).toMatchObject({ from: 'databaseUrl option' });
  });

  it('prefers an explicit dataDir (the embedded database) over DATABASE_URL', async () => {
    process.env.DATABASE_URL = 'postgres://nobody@127.0.0.1:1/nowhere';
    const engine = await createEngine({ dataDir: 'memory://', migrate: false });
    opened.push(engine);
    expect(engine.database.driver).toBe('pglite');
  });

  it('uses the embedded database under .palisade/db of the working directory when DATABASE_URL is not set', async () => {
    delete process.env.DATABASE_URL;
    const dir = await mkdtemp(join(tmpdir(), 'palisade-cfg-'));
    const cwd = process.cwd();
    process.chdir(dir);
    try {
      const { logger, records } = capturingLogger();
      const engine = await createEngine({ logger, migrate: false });
      opened.push(engine);
      expect(engine.database.driver).toBe('pglite');
      expect(records.find((r) => r.event === 'engine:database')).toMatchObject({
        database: 'embedded',
        at: resolve(dir, '.palisade/db'),
      });
      await engine.close();
    } finally {
      process.chdir(cwd);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a DATABASE_URL that is not a postgres:// URL, naming the variable', async () => {
    process.env.DATABASE_URL = 'mysql://root@localhost/app';
    const error = await palisadeRejectionOf(createEngine());
    expect(error.code).toBe('INVALID_OPTIONS');
    expect(error.message).toContain('DATABASE_URL: must start with postgres://');
  });
});

describe('a misused createEngine', () => {
  const url = useTestDatabase();
  let admin: postgres.Sql | undefined;
  afterEach(async () => {
    await admin?.end({ timeout: 1 });
    admin = undefined;
  });

  /** Backends connected to this file's database, other than the admin client's own. */
  async function backends(): Promise<number> {
    admin ??= postgres(url(), { max: 1, onnotice: () => undefined });
    const [row] = await admin<{ n: number }[]>`
      SELECT count(*)::int AS n FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid()`;
    return row!.n;
  }

  it.each([
    ['a URL given as sql', () => ({ sql: url(), schema: 'cfg_misuse' }), 'sql'],
    ['true given as logger', () => ({ databaseUrl: url(), logger: true, schema: 'cfg_misuse' }), 'logger'],
  ] as const)(
    'refuses %s with INVALID_OPTIONS naming it, and leaves no connection open',
    async (_, given, path) => {
      const before = await backends();
      const error = await palisadeRejectionOf(
        createEngine(given() as unknown as Parameters<typeof createEngine>[0]),
      );
      expect(error.code).toBe('INVALID_OPTIONS');
      expect(error.message).toContain(`${path}: must be`);
      expect(await backends()).toBe(before);
    },
  );
});

describe('a database the engine cannot use', () => {
  const url = useTestDatabase();

  it('fails with DATABASE_UNAVAILABLE naming host, port and database when nothing listens', async () => {
    const error = await palisadeRejectionOf(
      createEngine({ databaseUrl: 'postgres://postgres@127.0.0.1:1/appdb' }),
    );
    expect(error.code).toBe('DATABASE_UNAVAILABLE');
    expect(error.message).toMatch(
      /^\[DATABASE_UNAVAILABLE\] cannot reach PostgreSQL at 127\.0\.0\.1:1 for database "appdb" \(127\.0\.0\.1:1\/appdb \(from databaseUrl\)\): ECONNREFUSED\. Start the server/,
    );
  });

  it('fails with DATABASE_NOT_FOUND naming the database when it does not exist', async () => {
    const missing = withUrl(url(), (u) => (u.pathname = '/palisade_no_such_db'));
    process.env.DATABASE_URL = missing;
    const error = await palisadeRejectionOf(createEngine());
    const u = new URL(missing);
    expect(error.code).toBe('DATABASE_NOT_FOUND');
    expect(error.message).toContain(
      `database "palisade_no_such_db" does not exist on ${u.hostname}:${u.port || '5432'} (`,
    );
    expect(error.message).toContain('(from DATABASE_URL)');
  });

  it('fails with DATABASE_AUTH_FAILED naming user and database when the server refuses the credentials', async () => {
    const refused = withUrl(url(), (u) => {
      u.username = 'palisade_no_such_role';
      u.password = 'wrong-pw';
    });
    const error = await palisadeRejectionOf(createEngine({ databaseUrl: refused }));
    expect(error.code).toBe('DATABASE_AUTH_FAILED');
    expect(error.message).toContain('refused the credentials of user "palisade_no_such_role" for database "');
    expect(error.message).not.toContain('wrong-pw');
  });
});
