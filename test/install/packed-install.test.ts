/**
 * The packages as a user gets them: both are packed (packing builds them), installed with plain npm into a fresh
 * application outside this workspace (no pnpm, no workspace links), type-checked with `tsc --noEmit` against a
 * file that uses the README's API, and run on the embedded database and on PostgreSQL; the closed-connection
 * driver check runs against the installed package; the installed CLI loads a TypeScript worker module with the
 * project's tsx and says how to fix it without tsx.
 *
 * Needs the npm registry (zod, typescript, tsx and the engine's dependencies are downloaded once per run): when
 * `npm ping` cannot reach the registry npm is configured with, the file is skipped, saying why, rather than failing
 * in its install step.
 */
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLOSED_SOCKET_EXPECTED, closedSocketScript } from '../support/closed-socket-script.js';
import { useTestDatabase } from '../support/postgres.js';
import { APP_DEFS, APP_MAIN, APP_PACKAGE_JSON, APP_TSCONFIG } from './app-source.js';

const execFileAsync = promisify(execFile);
const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const INSTALL_TIMEOUT_MS = 600_000;

/**
 * An environment with nothing of pnpm's or vitest's in it (npm_config_*, NODE_OPTIONS, DATABASE_URL), so npm and
 * the application behave as in a fresh shell.
 */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (/^(npm_|NODE_OPTIONS$|DATABASE_URL$|PALISADE_|VITEST|PNPM_|INIT_CWD$)/i.test(key)) continue;
    env[key] = value;
  }
  return { ...env, ...extra };
}

async function run(
  file: string,
  args: readonly string[],
  cwd: string,
  env: NodeJS.ProcessEnv = cleanEnv(),
): Promise<{ stdout: string; stderr: string }> {
  try {
    return await execFileAsync(file, [...args], { cwd, env, maxBuffer: 64 * 1024 * 1024 });
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string; message: string };
    throw new Error(
      `${file} ${args.join(' ')} failed in ${cwd}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`,
    );
  }
}

/** Whether the registry npm is configured with answers `npm ping`; if not, why (for the skip notice). */
async function npmRegistry(): Promise<{ reachable: true } | { reachable: false; reason: string }> {
  try {
    await execFileAsync('npm', ['ping', '--fetch-timeout=15000', '--fetch-retries=1'], {
      cwd: tmpdir(),
      env: cleanEnv(),
      timeout: 60_000,
    });
    return { reachable: true };
  } catch (error) {
    const e = error as { stderr?: string; message: string };
    const reason =
      (e.stderr ?? '')
        .trim()
        .split('\n')
        .find((l) => /FetchError|ERR!|npm error/.test(l)) ?? e.message;
    return { reachable: false, reason: reason.slice(0, 300) };
  }
}

const registry = await npmRegistry();
if (!registry.reachable) {
  console.warn(`packed-install: skipped, the npm registry is unreachable (${registry.reason})`);
}

let root = '';
let app = '';
let tarballs: string[] = [];

beforeAll(async () => {
  if (!registry.reachable) return;
  root = await mkdtemp(join(tmpdir(), 'palisade-install-'));
  const packs = join(root, 'packs');
  await mkdir(packs);
  // Exactly the README's Install section: pnpm pack in each package (its prepack builds it), then npm install.
  for (const pkg of ['sdk', 'engine']) {
    await run(
      'npx',
      ['-y', 'pnpm@12.4.2', 'pack', '--pack-destination', packs],
      join(REPO_ROOT, 'packages', pkg),
    );
  }
  tarballs = (await readdir(packs)).sort().map((f) => join(packs, f));
  app = join(root, 'app');
  await mkdir(app);
  await writeFile(join(app, 'package.json'), APP_PACKAGE_JSON);
  await writeFile(join(app, 'tsconfig.json'), APP_TSCONFIG);
  await writeFile(join(app, 'defs.ts'), APP_DEFS);
  await writeFile(join(app, 'main.ts'), APP_MAIN);
  await run(
    'npm',
    [
      'install',
      '--no-audit',
      '--no-fund',
      join(packs, 'palisade-sdk-0.1.0.tgz'),
      join(packs, 'palisade-engine-0.1.0.tgz'),
      'zod',
      'typescript@5.9.3',
      'tsx',
      '@types/node@20',
    ],
    app,
  );
}, INSTALL_TIMEOUT_MS);

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

describe.skipIf(!registry.reachable)('the packed packages installed with npm in a fresh application', () => {
  const databaseUrl = useTestDatabase();

  it('packs built ESM and type declarations, a README and a licence, with real version ranges', () => {
    expect(tarballs.map((t) => t.slice(t.lastIndexOf('/') + 1))).toEqual([
      'palisade-engine-0.1.0.tgz',
      'palisade-sdk-0.1.0.tgz',
    ]);
    const engine = JSON.parse(
      readFileSync(join(app, 'node_modules/@palisade/engine/package.json'), 'utf8'),
    ) as Record<string, Record<string, unknown>>;
    expect(engine.dependencies?.['@palisade/sdk']).toBe('^0.1.0');
    expect(JSON.stringify(engine)).not.toContain('workspace:');
    expect(JSON.stringify(engine.exports)).not.toContain('src/');
    for (const file of [
      'engine/dist/index.js',
      'engine/dist/index.d.ts',
      'engine/dist/cli/main.js',
      'engine/dist/migrations/0000_tables.sql',
      'engine/vendor/postgres/index.js',
      'engine/README.md',
      'engine/LICENSE',
      'sdk/dist/index.js',
      'sdk/dist/index.d.ts',
      'sdk/README.md',
      'sdk/LICENSE',
    ]) {
      expect(existsSync(join(app, 'node_modules/@palisade', file)), file).toBe(true);
    }
    expect(existsSync(join(app, 'node_modules/@palisade/engine/src'))).toBe(false);
    expect(existsSync(join(app, 'node_modules/@palisade/sdk/dist/activity.test.js'))).toBe(false);
  });

  it('type-checks an application that uses the README API with tsc --noEmit', async () => {
    await run(join(app, 'node_modules/.bin/tsc'), ['--noEmit', '-p', '.'], app);
  });

  it('runs the application on the embedded database when DATABASE_URL is not set, and palisade runs list finds its run', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'main.ts'], app);
    expect(JSON.parse(stdout)).toMatchObject({
      driver: 'pglite',
      output: { charged: 2 },
      handle: { created: true },
      steps: ['completed', 'completed'],
      retryUnknown: 'RUN_NOT_FOUND',
    });
    const listed = await run(join(app, 'node_modules/.bin/palisade'), ['runs', 'list', '--json'], app);
    const runs = JSON.parse(listed.stdout) as { name: string; status: string; idempotencyKey?: string }[];
    expect(runs.map((r) => [r.name, r.status])).toEqual([['settle', 'completed']]);
  });

  it('runs the application on PostgreSQL from DATABASE_URL', async () => {
    const { stdout } = await run(
      process.execPath,
      ['--import', 'tsx', 'main.ts'],
      app,
      cleanEnv({ DATABASE_URL: databaseUrl() }),
    );
    expect(JSON.parse(stdout)).toMatchObject({
      driver: 'postgres',
      output: { charged: 2 },
      handle: { created: true },
    });
  });

  it("protects the installed package's driver from a connection the server closed", async () => {
    const child = spawn(
      process.execPath,
      ['--input-type=module', '-e', closedSocketScript('@palisade/engine/postgres'), databaseUrl()],
      { cwd: app, env: cleanEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const [code] = (await once(child, 'close')) as [number | null]; // 'close': all output read
    expect(stderr).not.toContain('TypeError');
    expect(code, stderr).toBe(0);
    expect(JSON.parse(stdout.trim())).toEqual(CLOSED_SOCKET_EXPECTED);
  });

  it("loads a TypeScript worker module with the project's tsx, and says how to fix it without tsx", async () => {
    const palisade = join(app, 'node_modules/.bin/palisade');
    const worker = spawn(palisade, ['worker', 'defs.ts'], {
      cwd: app,
      env: cleanEnv({ DATABASE_URL: databaseUrl() }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    worker.stderr.on('data', (chunk: Buffer) => (err += chunk.toString('utf8')));
    await new Promise<void>((resolve, reject) => {
      worker.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString('utf8');
        if (/activities\s+charge/.test(out)) resolve(); // the start-up banner's last line
      });
      worker.once('close', () => reject(new Error(`worker exited: ${out}\n${err}`)));
    });
    expect(out).toContain('worker started');
    worker.kill('SIGINT');
    const [code] = (await once(worker, 'close')) as [number | null];
    expect(code, err).toBe(0);

    // Outside the application (no node_modules, so no tsx), the same module is refused with the fix.
    const elsewhere = join(root, 'elsewhere');
    await mkdir(elsewhere, { recursive: true });
    await writeFile(join(elsewhere, 'defs.ts'), APP_DEFS);
    const refused = await execFileAsync(palisade, ['worker', 'defs.ts'], {
      cwd: elsewhere,
      env: cleanEnv({ DATABASE_URL: databaseUrl() }),
    }).then(
      () => ({ code: 0, stderr: '' }),
      (e: { code: number; stderr: string }) => e,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      '[INVALID_OPTIONS] worker module defs.ts is TypeScript, and Node.js cannot load it without a loader: install tsx',
    );
    expect(refused.stderr).toContain('npm install --save-dev tsx');
  });
});
