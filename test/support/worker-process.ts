/**
 * Worker processes for fault-injection tests: each runs ../fixtures/worker-main.ts in its own Node process, so
 * it can be frozen (SIGSTOP), killed (SIGKILL), blocked or cut off from the database without touching the test.
 *
 *   const workers = useWorkerProcesses();               // registers cleanup after each test
 *   const w1 = await workers.spawn({ databaseUrl, schema, workerId: 'w1', timings });
 *   const claimed = await w1.waitFor('attempt:claimed', (m) => m.attempt.runId === runId);
 *   w1.kill('SIGKILL');  or  await w1.stop();
 *
 * Every message the child sends is kept in `messages` (in arrival order) and emitted on `events` under its
 * type; `waitFor` looks at the messages already received before waiting, so it never misses one.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterEach } from 'vitest';
import type {
  ActivityCommand,
  ChildMessage,
  ChildMessageOf,
  ChildMessageType,
  ParentMessage,
  WorkerProcessConfig,
} from '../fixtures/worker-protocol.js';

const TEST_ROOT = fileURLToPath(new URL('..', import.meta.url));
const WORKER_MAIN = fileURLToPath(new URL('../fixtures/worker-main.ts', import.meta.url));
const CLOCK_SKEW_PRELOAD = new URL('./clock-skew.ts', import.meta.url).href;
const STDERR_TAIL_LINES = 200;

/**
 * The tsx loader, resolved like any dependency from this file (tsx is a devDependency of the workspace root,
 * so it is found in the root node_modules of any installed clone), passed to `node --import` as a file URL so
 * the child does not depend on its working directory.
 */
function tsxLoaderUrl(): string {
  return pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
}

export interface ExitInfo {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A wrong clock for a worker process (./clock-skew.ts, preloaded): research T9. */
export interface WorkerClockSkew {
  /** Added to the child's `Date.now()` / `new Date()` (ms). @defaultValue 0 */
  readonly offsetMs?: number;
  /** Rate of the child's `performance.now()` relative to real time (1.01: 1 % fast). @defaultValue 1 */
  readonly rate?: number;
}

export interface SpawnWorkerOptions {
  /** @defaultValue 120_000 */
  readonly readyTimeoutMs?: number;
  /**
   * Run the child with a skewed clock. The `wallMs` of its messages is corrected back by `offsetMs` on receipt,
   * so `messages` stay on the host clock (the checker compares them with the database's); the raw value is
   * checked once, at `process:ready`, to prove the skew took effect.
   */
  readonly clock?: WorkerClockSkew;
  /**
   * Absolute path of the module the child runs instead of ../fixtures/worker-main.ts; it takes the same config
   * argument and speaks the same protocol (../fixtures/poison-pglite-main.ts). @defaultValue worker-main.ts
   */
  readonly entry?: string;
}

export interface WaitOptions {
  /** @defaultValue 20_000 */
  readonly timeoutMs?: number;
  /** Only messages at or after this index of `messages` (see {@link WorkerProcess.mark}). @defaultValue 0 */
  readonly after?: number;
}

export interface WorkerProcess {
  readonly pid: number;
  readonly workerId: string;
  /** Every message received so far, in order. */
  readonly messages: readonly ChildMessage[];
  /** Emits each message under its `type`, and under `'message'`. */
  readonly events: EventEmitter;
  /** Resolves when the process has exited. */
  readonly exited: Promise<ExitInfo>;
  /** The current length of `messages`, to wait only for messages that arrive later. */
  mark(): number;
  /** Messages of `type` received so far that satisfy `predicate`. */
  all<T extends ChildMessageType>(
    type: T,
    predicate?: (m: ChildMessageOf<T>) => boolean,
  ): ChildMessageOf<T>[];
  /**
   * The first message of `type` satisfying `predicate`, already received or still to come.
   * @throws after `timeoutMs`, or when the process exits first (with its stderr tail).
   */
  waitFor<T extends ChildMessageType>(
    type: T,
    predicate?: (m: ChildMessageOf<T>) => boolean,
    options?: WaitOptions,
  ): Promise<ChildMessageOf<T>>;
  /** Send `command` to the process's extension activities (`env.commands`). @throws if the process is gone. */
  command(command: ActivityCommand): void;
  /** Start claiming (for a worker spawned with `deferStart`). Resolves on `worker:started`. */
  start(): Promise<void>;
  /** Stop gracefully (worker.stop in the child); SIGKILL if it has not exited within `graceMs` + 5 s. */
  stop(graceMs?: number): Promise<ExitInfo>;
  /** Send a signal (SIGKILL, SIGSTOP, SIGCONT, SIGTERM…). @returns false if the process is gone. */
  kill(signal: NodeJS.Signals): boolean;
  /** The last lines the child wrote to stderr (engine warnings, crashes). */
  stderr(): string;
}

/** Spawn one worker process and wait until it reports `process:ready` (engine open, worker started unless deferred). */
export async function spawnWorkerProcess(
  config: WorkerProcessConfig,
  options: SpawnWorkerOptions = {},
): Promise<WorkerProcess> {
  const skewOffsetMs = options.clock?.offsetMs ?? 0;
  const skewed = options.clock !== undefined;
  const child: ChildProcess = spawn(
    process.execPath,
    [
      '--conditions=@palisade/source',
      '--import',
      tsxLoaderUrl(),
      ...(skewed ? ['--import', CLOCK_SKEW_PRELOAD] : []),
      options.entry ?? WORKER_MAIN,
      JSON.stringify(config),
    ],
    {
      cwd: TEST_ROOT,
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      env: {
        ...process.env,
        PALISADE_LOG_LEVEL: process.env.PALISADE_LOG_LEVEL ?? 'warn',
        ...(skewed
          ? {
              PALISADE_TEST_CLOCK_OFFSET_MS: String(skewOffsetMs),
              PALISADE_TEST_CLOCK_RATE: String(options.clock?.rate ?? 1),
            }
          : {}),
      },
    },
  );
  if (child.pid === undefined) {
    const [error] = (await once(child, 'error')) as [Error];
    throw new Error(`could not spawn worker ${config.workerId}: ${error.message}`, { cause: error });
  }
  const pid = child.pid;
  const stderrTail: string[] = [];
  const keep = (chunk: Buffer): void => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line.trim() === '') continue;
      stderrTail.push(line);
      if (stderrTail.length > STDERR_TAIL_LINES) stderrTail.shift();
    }
  };
  child.stderr?.on('data', keep);
  child.stdout?.on('data', keep);

  const messages: ChildMessage[] = [];
  const events = new EventEmitter();
  events.setMaxListeners(0);
  let exitInfo: ExitInfo | undefined;
  // 'close', not 'exit': a child's last IPC messages can be delivered after its 'exit' event (a worker that sent
  // `attempt:completed` and exited at once was reported as having exited without it); 'close' comes only once
  // the process ended and its stdio and IPC channel are closed, so every message it sent has been emitted.
  const exited = new Promise<ExitInfo>((resolve) => {
    child.once('close', (code, signal) => {
      exitInfo = { code, signal };
      events.emit('process:exit', exitInfo);
      resolve(exitInfo);
    });
  });
  let skewSeenMs: number | undefined;
  child.on('message', (raw) => {
    const message = raw as ChildMessage;
    if (skewOffsetMs !== 0) {
      if (message.type === 'process:ready') skewSeenMs = message.wallMs - Date.now();
      (message as { wallMs: number }).wallMs -= skewOffsetMs;
    }
    messages.push(message);
    events.emit(message.type, message);
    events.emit('message', message);
  });
  const stderr = (): string => stderrTail.join('\n');
  const describeExit = (e: ExitInfo): string =>
    `worker ${config.workerId} (pid ${pid}) exited (code ${e.code}, signal ${e.signal})\n--- stderr ---\n${stderr()}`;

  function all<T extends ChildMessageType>(
    type: T,
    predicate: (m: ChildMessageOf<T>) => boolean = () => true,
  ): ChildMessageOf<T>[] {
    return messages.filter(
      (m): m is ChildMessageOf<T> => m.type === type && predicate(m as ChildMessageOf<T>),
    );
  }

  function waitFor<T extends ChildMessageType>(
    type: T,
    predicate: (m: ChildMessageOf<T>) => boolean = () => true,
    { timeoutMs = 20_000, after = 0 }: WaitOptions = {},
  ): Promise<ChildMessageOf<T>> {
    const seen = messages
      .slice(after)
      .find((m): m is ChildMessageOf<T> => m.type === type && predicate(m as ChildMessageOf<T>));
    if (seen) return Promise.resolve(seen);
    return new Promise<ChildMessageOf<T>>((resolve, reject) => {
      const cleanup = (): void => {
        clearTimeout(timer);
        events.off(type, onMessage);
        events.off('process:exit', onExit);
      };
      const onMessage = (m: ChildMessageOf<T>): void => {
        if (!predicate(m)) return;
        cleanup();
        resolve(m);
      };
      const onExit = (e: ExitInfo): void => {
        cleanup();
        reject(
          new Error(
            `waiting for ${type}: ${describeExit(e)}\n--- last messages ---\n` +
              messages
                .slice(-12)
                .map(
                  (m) =>
                    `${m.type}${'attempt' in m ? ` ${(m.attempt as { stepLabel?: string }).stepLabel ?? ''}` : ''}`,
                )
                .join(', '),
          ),
        );
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(
          new Error(
            `worker ${config.workerId}: no ${type} within ${timeoutMs} ms; last messages: ` +
              `${messages
                .slice(-8)
                .map((m) => m.type)
                .join(', ')}\n--- stderr ---\n${stderr()}`,
          ),
        );
      }, timeoutMs);
      events.on(type, onMessage);
      if (exitInfo) onExit(exitInfo);
      else events.once('process:exit', onExit);
    });
  }

  const post = (message: ParentMessage): boolean => {
    if (!child.connected) return false;
    child.send(message);
    return true;
  };

  const handle: WorkerProcess = {
    pid,
    workerId: config.workerId,
    messages,
    events,
    exited,
    mark: () => messages.length,
    all,
    waitFor,
    command(command) {
      if (!post({ type: 'command', command })) throw new Error(`worker ${config.workerId} is not connected`);
    },
    async start() {
      const from = messages.length;
      if (!post({ type: 'start' })) throw new Error(`worker ${config.workerId} is not connected`);
      await waitFor('worker:started', undefined, { after: from });
    },
    async stop(graceMs = config.shutdownGraceMs ?? 2_000) {
      if (exitInfo) return exitInfo;
      child.kill('SIGCONT'); // a frozen worker cannot stop
      if (!post({ type: 'stop', graceMs })) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs + 5_000);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
    kill: (signal) => (exitInfo ? false : child.kill(signal)),
    stderr,
  };

  try {
    await waitFor('process:ready', undefined, { timeoutMs: options.readyTimeoutMs ?? 120_000 });
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  if (skewOffsetMs !== 0 && (skewSeenMs === undefined || Math.abs(skewSeenMs - skewOffsetMs) > 10_000)) {
    child.kill('SIGKILL');
    throw new Error(
      `worker ${config.workerId}: clock offset ${skewOffsetMs} ms requested, its clock read ${skewSeenMs} ms off`,
    );
  }
  const fatal = messages.find((m) => m.type === 'process:fatal');
  if (fatal) {
    child.kill('SIGKILL');
    throw new Error(`worker ${config.workerId} failed: ${JSON.stringify(fatal)}\n${stderr()}`);
  }
  return handle;
}

/** A set of worker processes that are stopped (or killed) after each test, and killed if the test process exits. */
export function useWorkerProcesses(): {
  spawn(config: WorkerProcessConfig, options?: SpawnWorkerOptions): Promise<WorkerProcess>;
} {
  const live = new Set<WorkerProcess>();
  const killAll = (): void => {
    for (const w of live) {
      w.kill('SIGCONT');
      w.kill('SIGKILL');
    }
  };
  process.on('exit', killAll);
  afterEach(async () => {
    const workers = [...live];
    live.clear();
    await Promise.all(workers.map((w) => w.stop(500)));
  });
  return {
    async spawn(config, options) {
      const w = await spawnWorkerProcess(config, options);
      live.add(w);
      return w;
    },
  };
}
