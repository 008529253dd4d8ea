/**
 * Plain SQL reads of an engine's own tables, for assertions: the rows exactly as stored, not as the client
 * presents them. Shared by the fencing tests in this folder.
 */
import { sql } from 'drizzle-orm';
import type { Engine } from '@palisade/engine';
import type { ClaimedStepRow } from '@palisade/engine/testing/internals';
import { storedOutput } from '../worker/helpers.js';

/** A step row as stored, serialized by the database (`to_jsonb(steps.*)::text`), to compare byte for byte. */
export async function stepRowJson(engine: Engine, stepId: string): Promise<string> {
  const rows = await engine.database.rows<{ row: string }>(
    sql`SELECT to_jsonb(s.*)::text AS row FROM ${engine.names.steps} s WHERE s.id = ${stepId}::uuid`,
  );
  if (!rows[0]) throw new Error(`no step ${stepId}`);
  return rows[0].row;
}

export interface StoredStep {
  id: string;
  run_id: string;
  status: string;
  attempt: number;
  epoch: number;
  token: string | null;
  nonce: string | null;
  error: unknown;
  output: unknown;
  lease_expires_at: string | null;
}

/** The one step of a standalone run. */
export async function stepOfRun(engine: Engine, runId: string): Promise<StoredStep> {
  const rows = await engine.database.rows<StoredStep>(sql`
    SELECT s.id::text, s.run_id::text, s.status, s.attempt, s.epoch, s.fencing_token::text AS token, s.nonce::text,
           s.error, ${storedOutput} AS output, s.lease_expires_at::text
      FROM ${engine.names.steps} s JOIN ${engine.names.runs} r ON r.id = s.run_id
     WHERE s.run_id = ${runId}::uuid ORDER BY s.seq LIMIT 1`);
  if (!rows[0]) throw new Error(`run ${runId} has no step`);
  return rows[0];
}

export interface StoredAttempt {
  attempt: number;
  epoch: number;
  token: string;
  worker_id: string;
  outcome: string | null;
}

/** The attempts rows of a step, in claim order. */
export async function attemptsOfStep(engine: Engine, stepId: string): Promise<StoredAttempt[]> {
  return engine.database.rows<StoredAttempt>(sql`
    SELECT attempt, epoch, fencing_token::text AS token, worker_id, outcome
      FROM ${engine.names.attempts} WHERE step_id = ${stepId}::uuid ORDER BY fencing_token`);
}

export interface StoredEvent {
  type: string;
  step_id: string | null;
  attempt: number | null;
  epoch: number | null;
  token: string | null;
  worker_id: string | null;
  data: Record<string, unknown> | null;
  terminal: boolean;
}

/** Events of a run in append order, optionally only those of one type. */
export async function eventsOfRun(engine: Engine, runId: string, type?: string): Promise<StoredEvent[]> {
  return engine.database.rows<StoredEvent>(sql`
    SELECT type, step_id::text, attempt, epoch, fencing_token::text AS token, worker_id, data, terminal
      FROM ${engine.names.runEvents}
     WHERE run_id = ${runId}::uuid AND (${type ?? null}::text IS NULL OR type = ${type ?? null})
     ORDER BY at, rank, ord`);
}

/** Events of one type across every run of the engine's schema, in append order. */
export async function eventsOfType(engine: Engine, type: string): Promise<StoredEvent[]> {
  return engine.database.rows<StoredEvent>(sql`
    SELECT type, step_id::text, attempt, epoch, fencing_token::text AS token, worker_id, data, terminal
      FROM ${engine.names.runEvents} WHERE type = ${type} ORDER BY at, rank, ord`);
}

/** The SQLSTATE of a database error, wherever the driver wrapper put it. */
export function sqlState(error: unknown): string | undefined {
  let current: unknown = error;
  for (let depth = 0; depth < 5 && current && typeof current === 'object'; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Re-exported for core tests whose import blocks name this module (./fenced-writes.test.ts). */
export { rejectionOf } from '../support/rejections.js';

/** The attempt a claimed step row grants, as the engine's fenced writes (completion, failure, heartbeat) name it. */
export function attemptRefOf(row: ClaimedStepRow) {
  return {
    runId: row.run_id,
    stepId: row.id,
    stepLabel: `${row.name}#${row.seq}`,
    attempt: row.attempt,
    token: BigInt(row.token),
    nonce: row.nonce,
  };
}
