/**
 * Reads of a workflow run's rows as stored, and event-driven waits, for the tests in this folder.
 */
import { sql } from 'drizzle-orm';
import type { Engine, Worker, WorkerEventMap } from '@palisade/engine';
import type { AttemptRecord } from '../support/fault-case.js';
import { checkOnEvents, type EventSource } from '../support/wait.js';

export interface StoredRun {
  status: string;
  error: { code?: string; message: string; type: string } | null;
  turn_attempt: number;
  turn_epoch: number;
  turn_token: string | null;
  turn_lease_expires_at: string | null;
  turn_next_run_at_ms: number | null;
}

export async function runOf(engine: Engine, runId: string): Promise<StoredRun> {
  const rows = await engine.database.rows<StoredRun>(sql`
    SELECT status, error, turn_attempt, turn_epoch, turn_token::text, turn_lease_expires_at::text,
           (extract(epoch FROM turn_next_run_at) * 1000)::float8 AS turn_next_run_at_ms
      FROM ${engine.names.runs} WHERE id = ${runId}::uuid`);
  if (!rows[0]) throw new Error(`no run ${runId}`);
  return rows[0];
}

export interface StoredStep {
  id: string;
  seq: number;
  kind: string;
  name: string;
  status: string;
  queue: string;
  attempt: number;
  epoch: number;
  token: string | null;
  /** The options of the `policies` row the step names. */
  lease_ms: number;
  start_to_close_timeout_ms: number;
  retry_policy: Record<string, unknown>;
  output: unknown;
  error: { type: string; message: string } | null;
  lease_expires_at: string | null;
  delivered_seq: number | null;
  next_run_at_ms: number | null;
  created_at_ms: number;
}

/** A run's steps in position order. */
export async function stepsOf(engine: Engine, runId: string): Promise<StoredStep[]> {
  return engine.database.rows<StoredStep>(sql`
    SELECT s.id::text, s.seq, s.kind, s.name, s.status, s.queue, s.attempt, s.epoch, s.fencing_token::text AS token,
           p.lease_ms, p.start_to_close_timeout_ms, p.retry_policy, s.output, s.error, s.lease_expires_at::text,
           s.delivered_seq, (extract(epoch FROM s.next_run_at) * 1000)::float8 AS next_run_at_ms,
           (extract(epoch FROM s.created_at) * 1000)::float8 AS created_at_ms
      FROM ${engine.names.steps} s JOIN ${engine.names.policies} p ON p.id = s.policy_id
     WHERE s.run_id = ${runId}::uuid ORDER BY s.seq`);
}

/** One claim of a run as stored (its end time left out). */
export interface StoredAttempt extends Omit<AttemptRecord, 'ended_at_ms'> {
  kind: 'activity' | 'turn';
  seq: number | null;
}

/** Every claim of the run (its turns and its steps), in claim order. */
export async function attemptsOf(engine: Engine, runId: string): Promise<StoredAttempt[]> {
  return engine.database.rows<StoredAttempt>(sql`
    SELECT a.kind, s.seq, a.attempt, a.epoch, a.fencing_token::text AS token, a.worker_id, a.outcome,
           (extract(epoch FROM a.claimed_at) * 1000)::float8 AS claimed_at_ms
      FROM ${engine.names.attempts} a LEFT JOIN ${engine.names.steps} s ON s.id = a.step_id
     WHERE a.run_id = ${runId}::uuid ORDER BY a.fencing_token`);
}

/** The engine's database time, epoch ms. */
export async function dbNowMs(engine: Engine): Promise<number> {
  const rows = await engine.database.rows<{ ms: number }>(
    sql`SELECT (extract(epoch FROM ${engine.names.now}) * 1000)::float8 AS ms`,
  );
  return Number(rows[0]?.ms);
}

/**
 * Resolve once the stored steps of run `runId` (as {@link stepsOf} reads them) satisfy `check`, read again after
 * each event of `workers` ({@link checkOnEvents}); reject after 20 s with an error that names `what`.
 */
export function stepsReach(
  workers: readonly (Worker | EventSource)[],
  engine: Engine,
  runId: string,
  check: (steps: StoredStep[]) => boolean,
  what: string,
): Promise<void> {
  return checkOnEvents(workers, async () => check(await stepsOf(engine, runId)), what);
}

/** Resolve once run `runId` has a step of `kind` (a `'timer'`, a `'signal'` wait, …); as {@link stepsReach}. */
export function stepOfKindReached(
  workers: readonly (Worker | EventSource)[],
  engine: Engine,
  runId: string,
  kind: string,
  what: string,
): Promise<void> {
  return stepsReach(workers, engine, runId, (steps) => steps.some((s) => s.kind === kind), what);
}

/** Every `turn:committed` event `worker` emits from now on, in order. */
export function turnLog(worker: Worker): WorkerEventMap['turn:committed'][0][] {
  const log: WorkerEventMap['turn:committed'][0][] = [];
  worker.events.on('turn:committed', (e) => log.push(e));
  return log;
}

/**
 * Resolve once `worker` has reported the turn that completed run `runId` (a `turn:committed` with outcome
 * `completed` in `turns`, the log of {@link turnLog}): `result()` wakes on the commit's NOTIFY, which can arrive
 * before the worker reports that commit.
 */
export function lastTurn(
  worker: Worker | EventSource,
  turns: readonly WorkerEventMap['turn:committed'][0][],
  runId: string,
): Promise<void> {
  return checkOnEvents(
    [worker],
    () => turns.some((t) => t.runId === runId && t.outcome === 'completed'),
    `the last turn of ${runId}`,
  );
}

/** A promise with its resolve function outside. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
