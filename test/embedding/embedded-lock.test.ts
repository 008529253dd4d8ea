/**
 * The embedded database serves one process: a second process opening the same directory is refused at once,
 * naming the holder and the ways out, and loses nothing; a lock left by a dead process is taken over.
 */
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createEngine } from '@palisade/engine';
import { PalisadeError } from '@palisade/sdk';

const HOLDER = fileURLToPath(new URL('../fixtures/embedded-holder.ts', import.meta.url));
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

let root = '';
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'palisade-lock-'));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

it('refuses a second process on the same embedded directory at once, naming the holder, and loses none of its runs', async () => {
  const dataDir = join(root, 'shared');
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.NODE_OPTIONS;
  const holder = spawn(
    process.execPath,
    ['--conditions=@palisade/source', '--import', TSX, HOLDER, dataDir, '20'],
    {
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  holder.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const printed = (word: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => (stdout.includes(word) ? resolve() : undefined);
      holder.stdout.setEncoding('utf8').on('data', (chunk: string) => {
        stdout += chunk;
        check();
      });
      holder.once('close', () =>
        stdout.includes(word) ? resolve() : reject(new Error(`holder exited: ${stderr}`)),
      );
      check();
    });
  try {
    await printed('ready');
    const error = await createEngine({ dataDir }).then(
      async (engine) => {
        await engine.close();
        return undefined;
      },
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(PalisadeError);
    const refused = error as PalisadeError;
    expect(refused.code).toBe('EMBEDDED_DATABASE_LOCKED');
    expect(refused.message).toContain(
      `[EMBEDDED_DATABASE_LOCKED] the embedded database ${dataDir} is in use: process ${holder.pid} `,
    );
    expect(refused.message).toContain('Use one process');
    expect(refused.message).toContain('set DATABASE_URL');
    expect(refused.message).toContain('`palisade dev`');

    const closed = printed('closed');
    holder.stdin.end('close\n');
    await closed;
    await once(holder, 'close');
  } finally {
    holder.kill('SIGKILL');
  }
  expect(existsSync(`${dataDir}.lock`)).toBe(false);
  const engine = await createEngine({ dataDir });
  try {
    const runs = await engine.client.list({ limit: 100 });
    expect(runs.map((r) => r.idempotencyKey).sort()).toEqual(
      Array.from({ length: 20 }, (_, n) => `held-${n}`).sort(),
    );
  } finally {
    await engine.close();
  }
});

it('takes over a lock left by a process that is gone', async () => {
  const dataDir = join(root, 'stale');
  await mkdir(dataDir, { recursive: true });
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
    encoding: 'utf8',
  });
  const deadPid = Number(dead.stdout);
  writeFileSync(
    `${dataDir}.lock`,
    JSON.stringify({ pid: deadPid, hostname: hostname(), startedAt: '2026-01-01T00:00:00Z' }),
  );
  const engine = await createEngine({ dataDir, migrate: false });
  try {
    expect(JSON.parse(readFileSync(`${dataDir}.lock`, 'utf8'))).toMatchObject({ pid: process.pid });
  } finally {
    await engine.close();
  }
  expect(existsSync(`${dataDir}.lock`)).toBe(false);
});

/** The error `createEngine({ dataDir })` fails with; the lock is refused before PGlite opens anything. */
async function refusalOf(dataDir: string): Promise<PalisadeError> {
  const error = await createEngine({ dataDir, migrate: false }).then(
    async (engine) => {
      await engine.close();
      return undefined;
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PalisadeError);
  return error as PalisadeError;
}

it('never takes over the lock of another host by its pid, and names that host and pid', async () => {
  const dataDir = join(root, 'other-host');
  await mkdir(dataDir, { recursive: true });
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], {
    encoding: 'utf8',
  });
  // A pid that runs nowhere here: on this host the lock would be stale; on another host it says nothing.
  const lock = JSON.stringify({
    pid: Number(dead.stdout),
    hostname: `not-${hostname()}`,
    startedAt: '2026-01-01T00:00:00Z',
  });
  writeFileSync(`${dataDir}.lock`, lock);
  const error = await refusalOf(dataDir);
  expect(error.code).toBe('EMBEDDED_DATABASE_LOCKED');
  expect(error.message).toContain(`process ${Number(dead.stdout)} on not-${hostname()} holds it`);
  expect(readFileSync(`${dataDir}.lock`, 'utf8')).toBe(lock);
});

it.each([
  ['empty', ''],
  ['half written', '{"pid":12'],
])(
  'holds a lock file found %s (caught between its create and its write), never taking it for stale',
  async (name, text) => {
    const dataDir = join(root, `unreadable-${name.replace(' ', '-')}`);
    await mkdir(dataDir, { recursive: true });
    writeFileSync(`${dataDir}.lock`, text);
    const error = await refusalOf(dataDir);
    expect(error.code).toBe('EMBEDDED_DATABASE_LOCKED');
    expect(error.message).toContain(`its lock file ${dataDir}.lock cannot be read`);
    expect(readFileSync(`${dataDir}.lock`, 'utf8')).toBe(text);
  },
);
