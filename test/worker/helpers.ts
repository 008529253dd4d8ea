/**
 * Helpers shared by the worker and client integration tests: row readers that go under the client's
 * `describe()` (columns it does not show, times as DB-clock milliseconds), typed waits on worker events,
 * gates that let a test hold an activity at a known point, and a log recorder.
 */
import { sql } from 'drizzle-orm';
import type { CreateEngineOptions, Engine, Worker, WorkerEventMap } from '@palisade/engine';
import { nextEvent } from '../support/engine.js';

/** A promise the test resolves when it chooses: `await gate.promise` inside an activity holds it there. */
export interface Gate<T = void> {
  readonly promise: Promise<T>;
  open(value: T): void;
}

export function gate<T = void>(): Gate<T> {
  let open!: (value: T) => void;
  const promise = new Promise<T>((resolve) => (open = resolve));
  return { promise, open };
}

/** Resolves with the signal's reason once it fires (at once if it already has). */
export function aborted(signal: AbortSignal): Promise<unknown> {
  if (signal.aborted) return Promise.resolve(signal.reason);
  return new Promise((resolve) =>
    signal.addEventListener('abort', () => resolve(signal.reason), { once: true }),
  );
}

/** What a promise settled with, so a test can inspect a rejection without try/catch. */
export async function settle<T>(
  promise: Promise<T>,
): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  try {
    return { ok: true, value: await promise };
  } catch (error) {
    return { ok: false, error };
  }
}

/** The first `name` event of `worker` that satisfies `predicate` (set the wait up before causing the event). */
export function workerEvent<K extends keyof WorkerEventMap>(
  worker: Worker,
  name: K,
  predicate: (arg: WorkerEventMap[K][0]) => boolean = () => true,
  timeoutMs = 20_000,
): Promise<WorkerEventMap[K][0]> {
  type Arg = WorkerEventMap[K][0];
  const emitter = worker.events as unknown as {
    on(name: string, fn: (arg: Arg) => void): unknown;
    off(name: string, fn: (arg: Arg) => void): unknown;
  };
  return nextEvent<Arg>(emitter, name, predicate, timeoutMs);
}

export interface StepState {
  id: string;
  status: string;
  attempt: number;
  epoch: number;
  token: string | null;
  output: unknown;
  error: { type: string; message: string; nonRetryable: boolean; details?: unknown } | null;
  heartbeat_details: unknown;
  /** Its policy's lease (the `policies` row the step names). */
  lease_ms: number;
  /** DB-clock epoch ms. */
  next_run_at_ms: number | null;
  lease_expires_at_ms: number | null;
  last_heartbeat_at_ms: number | null;
}

/** The output stored for a step's completion: a standalone job's is stored once, on its run (not on its step). */
export const storedOutput = sql`CASE WHEN r.kind = 'activity' THEN r.output ELSE s.output END`;

/** The one step of a standalone run, with the columns the tests assert on (`output`: {@link storedOutput}). */
export async function stepOf(engine: Engine, runId: string): Promise<StepState> {
  const n = engine.names;
  const rows = await engine.database.rows<StepState>(sql`
    SELECT s.id::text, s.status, s.attempt, s.epoch, s.fencing_token::text AS token, s.error, s.heartbeat_details,
           pol.lease_ms, ${storedOutput} AS output,
           (extract(epoch FROM s.next_run_at) * 1000)::float8 AS next_run_at_ms,
           (extract(epoch FROM s.lease_expires_at) * 1000)::float8 AS lease_expires_at_ms,
           (extract(epoch FROM s.last_heartbeat_at) * 1000)::float8 AS last_heartbeat_at_ms
      FROM ${n.steps} s JOIN ${n.runs} r ON r.id = s.run_id JOIN ${n.policies} pol ON pol.id = s.policy_id
     WHERE s.run_id = ${runId}::uuid ORDER BY s.seq LIMIT 1`);
  const row = rows[0];
  if (!row) throw new Error(`run ${runId} has no step`);
  return row;
}

export interface AttemptState {
  attempt: number;
  epoch: number;
  token: string;
  worker_id: string;
  outcome: string | null;
  error: { type: string; message: string } | null;
  /** DB-clock epoch ms. */
  claimed_at_ms: number;
  ended_at_ms: number | null;
}

/** The attempts rows of a run, in claim order. */
export async function attemptsOf(engine: Engine, runId: string): Promise<AttemptState[]> {
  const n = engine.names;
  return engine.database.rows<AttemptState>(sql`
    SELECT attempt, epoch, fencing_token::text AS token, worker_id, outcome, error,
           (extract(epoch FROM claimed_at) * 1000)::float8 AS claimed_at_ms,
           (extract(epoch FROM ended_at) * 1000)::float8 AS ended_at_ms
      FROM ${n.attempts} WHERE run_id = ${runId}::uuid ORDER BY fencing_token`);
}

export interface EventState {
  type: string;
  attempt: number | null;
  epoch: number | null;
  token: string | null;
  terminal: boolean;
  data: Record<string, unknown> | null;
}

/** The events of a run, in order. */
export async function eventsOf(engine: Engine, runId: string): Promise<EventState[]> {
  const n = engine.names;
  return engine.database.rows<EventState>(sql`
    SELECT type, attempt, epoch, fencing_token::text AS token, terminal, data
      FROM ${n.runEvents} WHERE run_id = ${runId}::uuid ORDER BY at, rank, ord`);
}

/** The engine's database time (`<schema>.now()`, time travel included) in epoch ms. */
export async function dbNowMs(engine: Engine): Promise<number> {
  const rows = await engine.database.rows<{ ms: number }>(
    sql`SELECT (extract(epoch FROM ${engine.names.now}) * 1000)::float8 AS ms`,
  );
  return Number(rows[0]?.ms);
}

export interface LogRecord {
  readonly level: string;
  readonly msg: string | undefined;
  readonly [key: string]: unknown;
}

/**
 * A logger for `target.engine({ logger })` that keeps every record in memory (the engine logs with pino's
 * `(object, message)` call shape); only the methods the engine calls are needed.
 */
export function recordingLogger(): {
  logger: NonNullable<CreateEngineOptions['logger']>;
  records: LogRecord[];
} {
  const records: LogRecord[] = [];
  const at =
    (level: string) =>
    (first?: unknown, msg?: string): void => {
      if (typeof first === 'string') records.push({ level, msg: first });
      else records.push({ level, msg, ...(first as object) });
    };
  const logger: Record<string, unknown> = {
    level: 'trace',
    trace: at('trace'),
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    fatal: at('fatal'),
    isLevelEnabled: () => true,
  };
  logger.child = () => logger;
  return { logger: logger as unknown as NonNullable<CreateEngineOptions['logger']>, records };
}

/**
 * Make the first claim of steps arrive stale, deterministically: a trigger moves the DB clock forward by `jumpMs`
 * inside the claiming statement, after the lease was set from the statement's clock reading and before the lease
 * left is measured (the same statement reads `now()` again). The grant then reports `leaseMs - jumpMs` left, as if
 * its reply had been that late; every grant of that statement reports the same. Later claims (epoch > 1) are
 * untouched. `onlyFlagged`: only the claim of a step whose input has `stale: true` moves the clock (once).
 */
export async function makeFirstGrantsStale(
  engine: Engine,
  jumpMs: number,
  options: { onlyFlagged?: boolean } = {},
): Promise<void> {
  const schema = engine.names.schema;
  const flagged = options.onlyFlagged ? ` AND (NEW.input->>'stale')::boolean` : '';
  await engine.database.rows(
    sql.raw(`
    CREATE FUNCTION "${schema}".test_stale_first_grant() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF OLD.status = 'scheduled' AND NEW.status = 'running' AND NEW.epoch = 1${flagged} THEN
        INSERT INTO "${schema}".clock_offset (id, offset_ms) VALUES (true, ${jumpMs})
        ON CONFLICT (id) DO UPDATE SET offset_ms = "${schema}".clock_offset.offset_ms + ${jumpMs};
      END IF;
      RETURN NEW;
    END $$`),
  );
  await engine.database.rows(
    sql.raw(`
    CREATE TRIGGER test_stale_first_grant BEFORE UPDATE ON "${schema}".steps
      FOR EACH ROW EXECUTE FUNCTION "${schema}".test_stale_first_grant()`),
  );
}
