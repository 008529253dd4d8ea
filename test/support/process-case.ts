/**
 * Fault cases served by worker processes (test/cases/*): the per-file hooks (an engine target on PostgreSQL, the
 * worker processes, the fault case's per-test resources), the config each worker process gets from the file's
 * defaults, and the crash-suite moves built on them: a serving worker with a spare spawned ahead, and a SIGKILL
 * asserted to have killed.
 *
 *   const { workers, faults, config } = useProcessCase({ timings, pollIntervalMs: 200, ...heartbeatEvery(500) });
 *   const w1 = await workers.spawn(config(c, 'w1', { deferStart: true }));
 */
import { expect } from 'vitest';
import type { WorkerProcessConfig } from '../fixtures/worker-protocol.js';
import { useEngineTarget, type EngineTarget } from './engine.js';
import { useFaultCase, type FaultCase } from './fault-case.js';
import { runRecords, type RunRecords } from './run-records.js';
import { useWorkerProcesses, type WorkerProcess } from './worker-process.js';

/** What a `record-step` activity returns: its step label, the token it ran under and its worker. */
export interface StepResult {
  step: string;
  token: string;
  workerId: string;
}

/** The retry policy of the crash suites: the reclaim backoff after an expiry is its interval, short, no jitter. */
export const SHORT_RETRY = { maximumAttempts: 3, initialIntervalMs: 100, jitter: 0 } as const;

/** The file-wide part of a worker process's config: everything but where it connects and its id. */
export type ProcessDefaults = Omit<Partial<WorkerProcessConfig>, 'schema' | 'workerId'>;

/** Heartbeats every `ms`, each bounded by `ms`: the two options the cases always set together. */
export function heartbeatEvery(
  ms: number,
): Pick<WorkerProcessConfig, 'heartbeatIntervalMs' | 'heartbeatTimeoutMs'> {
  return { heartbeatIntervalMs: ms, heartbeatTimeoutMs: ms };
}

export interface ProcessCase {
  readonly target: EngineTarget;
  readonly workers: ReturnType<typeof useWorkerProcesses>;
  readonly faults: ReturnType<typeof useFaultCase>;
  /**
   * The config of worker `workerId` on the case's database: the file's defaults, then `extra` (which may name
   * another `databaseUrl`, e.g. a proxy's, or other `timings`).
   * @throws Error when neither the defaults nor `extra` give `timings`.
   */
  readonly config: (
    c: FaultCase,
    workerId: string,
    extra?: Partial<WorkerProcessConfig>,
  ) => WorkerProcessConfig;
  /**
   * A fresh case with two workers: `first` serving, `second` spawned ahead with `deferStart` (started by the
   * test when the case says so, so a bound measures the engine, not Node's start-up).
   */
  readonly setUpPair: (
    first?: string,
    second?: string,
  ) => Promise<{ c: FaultCase; db: RunRecords; w1: WorkerProcess; w2: WorkerProcess }>;
}

/** Register the per-file hooks of a process-based fault case; `defaults` go into every worker's config. */
export function useProcessCase(defaults: ProcessDefaults = {}): ProcessCase {
  const target = useEngineTarget('postgres');
  const workers = useWorkerProcesses();
  const faults = useFaultCase(target);
  const config = (
    c: FaultCase,
    workerId: string,
    extra: Partial<WorkerProcessConfig> = {},
  ): WorkerProcessConfig => {
    const { timings, ...rest } = { ...defaults, ...extra };
    if (!timings) throw new Error(`worker ${workerId}: no timings in the file's defaults or the call`);
    return { databaseUrl: c.databaseUrl, schema: c.schema, workerId, timings, ...rest };
  };
  return {
    target,
    workers,
    faults,
    config,
    async setUpPair(first = 'w1', second = 'w2') {
      const c = await faults.setUp();
      const [w1, w2] = await Promise.all([
        workers.spawn(config(c, first)),
        workers.spawn(config(c, second, { deferStart: true })),
      ]);
      return { c, db: runRecords(c.sql, c.schema), w1, w2 };
    },
  };
}

/** SIGKILL `w` and wait until it is gone, asserting the signal reached it and is what ended it. */
export async function sigkill(w: WorkerProcess): Promise<void> {
  expect(w.kill('SIGKILL')).toBe(true);
  expect(await w.exited).toMatchObject({ signal: 'SIGKILL' });
}
