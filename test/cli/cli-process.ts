/**
 * The `palisade` CLI as a child process, run from source as `pnpm palisade` runs it, but reached through the
 * package's `./cli` export (`palisade.ts` beside this file imports `@palisade/engine/cli`):
 *
 *   node --conditions=@palisade/source --import tsx test/cli/palisade.ts <args>
 *
 * (with tsx's loader given by path, so that the working directory may be anywhere).
 * `runCli` waits for the exit; `startCli` returns a running process (for `worker`) whose output can be waited on.
 * The child gets the test's environment without DATABASE_URL and PALISADE_SCHEMA, so every test says which
 * database it means.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const TEST_ROOT = fileURLToPath(new URL('../', import.meta.url));
const MAIN = fileURLToPath(new URL('./palisade.ts', import.meta.url));
/** tsx's loader by URL, so the child may run in any working directory (not only inside the repository). */
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;

/**
 * Timeout of a test that runs CLI processes: each one starts Node, tsx and the engine from source, which takes
 * seconds on a busy machine, and some tests run several.
 */
export const CLI_TEST_TIMEOUT_MS = 180_000;

export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  /** @defaultValue the repository root */
  readonly cwd?: string;
  /** Added to (or, when undefined, removed from) the child's environment. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Kill the child (SIGKILL) after this long. @defaultValue 90_000 */
  readonly timeoutMs?: number;
}

export interface RunningCli {
  readonly child: ChildProcess;
  /** Everything printed so far. */
  stdout(): string;
  stderr(): string;
  /** Resolve once stdout matches `pattern`; reject if the process exits first or after `timeoutMs`. */
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** The exit, with all output. */
  readonly exited: Promise<CliResult>;
}

function childEnv(extra: CliOptions['env'] = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.DATABASE_URL;
  delete env.PALISADE_SCHEMA;
  delete env.NODE_OPTIONS; // vitest's own loader options must not leak into the CLI
  for (const [key, value] of Object.entries(extra)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  return env;
}

/** Start `palisade <args>`. */
export function startCli(args: readonly string[], options: CliOptions = {}): RunningCli {
  const child = spawn(process.execPath, ['--conditions=@palisade/source', '--import', TSX, MAIN, ...args], {
    cwd: options.cwd ?? REPO_ROOT,
    env: childEnv(options.env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let done = false;
  const watchers = new Set<() => void>();
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    for (const w of watchers) w();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const killer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 90_000);
  const exited = new Promise<CliResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(killer);
      done = true; // before the watchers run, so a wait for output that never came fails now
      for (const w of watchers) w();
      resolve({ code, signal, stdout, stderr });
    });
  });
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    exited,
    waitForOutput(pattern, timeoutMs = 60_000) {
      return new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => {
          watchers.delete(check);
          reject(
            new Error(
              `no output matching ${pattern} within ${timeoutMs} ms; stdout:\n${stdout}\nstderr:\n${stderr}`,
            ),
          );
        }, timeoutMs);
        function check(): void {
          const match = pattern.exec(stdout);
          if (match) {
            clearTimeout(timer);
            watchers.delete(check);
            resolve(match[0]);
          } else if (done) {
            clearTimeout(timer);
            watchers.delete(check);
            reject(new Error(`exited before printing ${pattern}; stdout:\n${stdout}\nstderr:\n${stderr}`));
          }
        }
        watchers.add(check);
        check();
      });
    },
  };
}

/** Run `palisade <args>` to its exit. */
export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return startCli(args, options).exited;
}

/** Lines of `text` without the trailing empty one. */
export function lines(text: string): string[] {
  return text.split('\n').filter((line, i, all) => i < all.length - 1 || line !== '');
}
