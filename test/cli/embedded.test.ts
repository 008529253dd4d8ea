/**
 * The CLI with no database URL: the embedded database (PGlite) under `.palisade/db` of the working directory,
 * or under --data-dir. Slow to create (PGlite initialises its data directory), so one file on its own.
 */
import { mkdtemp, realpath, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { loadMigrations } from '@palisade/engine';
import { runCli } from './cli-process.js';

it('creates the embedded database under .palisade/db of the working directory, then reads it', async () => {
  const cwd = await realpath(await mkdtemp(join(tmpdir(), 'palisade-cli-'))); // as the child's cwd sees it
  try {
    const before = await runCli(['runs', 'list'], { cwd });
    expect(before.code).toBe(1);
    expect(before.stderr).toBe(
      `[INVALID_OPTIONS] no embedded database at ${join(cwd, '.palisade/db')}. Run \`palisade migrate\` to ` +
        'create one there, or point at PostgreSQL with --database-url (or DATABASE_URL).\n',
    );

    const migrated = await runCli(['migrate', '--json'], { cwd, timeoutMs: 150_000 });
    expect(migrated.stderr).toBe('');
    expect(migrated.code).toBe(0);
    const known = (await loadMigrations()).map((m) => m.name);
    expect(JSON.parse(migrated.stdout)).toEqual({
      schema: 'palisade',
      applied: known,
      version: known.length,
      known: known.length,
    });

    const listed = await runCli(['runs', 'list', '--data-dir', '.palisade/db'], { cwd, timeoutMs: 90_000 });
    expect(listed.stderr).toBe('');
    expect(listed.code).toBe(0);
    expect(listed.stdout).toBe('no runs in schema palisade\n');
  } finally {
    await rm(cwd, { recursive: true, force: true });
  }
}, 300_000);

it('refuses a --data-dir naming a file, a --database-url or DATABASE_URL it cannot parse, naming each and no password', async () => {
  const cwd = await realpath(await mkdtemp(join(tmpdir(), 'palisade-cli-')));
  try {
    await writeFile(join(cwd, 'a-file'), 'x');
    const file = await runCli(['migrate', '--data-dir', 'a-file'], { cwd });
    expect(file.code).toBe(1);
    expect(file.stderr).toMatch(
      /^\[INVALID_OPTIONS\] invalid database options: --data-dir: .*a-file is a file, not a directory/,
    );

    const port = await runCli(
      ['runs', 'list', '--database-url', 'postgres://app:hunter2@127.0.0.1:99999/app'],
      {
        cwd,
      },
    );
    expect(port.code).toBe(1);
    expect(port.stderr).toMatch(
      /^\[INVALID_OPTIONS\] invalid database options: --database-url: has port 99999 out of range/,
    );
    expect(port.stderr).not.toContain('hunter2');

    const encoding = await runCli(['runs', 'list'], {
      cwd,
      env: { DATABASE_URL: 'postgres://app:hunter2%zz@127.0.0.1/app' },
    });
    expect(encoding.code).toBe(1);
    expect(encoding.stderr).toMatch(
      /^\[INVALID_OPTIONS\] invalid database options: DATABASE_URL: has a bad percent-encoding/,
    );
    expect(encoding.stderr).not.toContain('hunter2');
  } finally {
    await rm(cwd, { recursive: true, force: true });
  }
}, 120_000);
