import { sql, type SQL } from 'drizzle-orm';
import { LeaseLostError, type FencedOperation } from '@palisade/sdk';
import type { SchemaNames } from './schema-names.js';

/** The fence every owner write of a step repeats (DESIGN.md §4 invariant 2): equality on token and nonce. */
export function stepFence(
  n: SchemaNames,
  alias: string,
  p: { stepId: string; token: bigint; nonce: string },
): SQL {
  const a = sql.raw(alias);
  return sql`${a}.id = ${p.stepId} AND ${a}.fencing_token = ${p.token.toString()}::bigint AND ${a}.nonce = ${p.nonce}::uuid
    AND ${a}.status = 'running' AND ${a}.lease_expires_at > ${n.now}`;
}

/**
 * CTEs appended to a fenced write whose own CTE is named `applied`: when the write matched nothing, they read
 * the step's latest committed version (`FOR SHARE` waits for a concurrent claim to commit, so the current
 * token is the real one), and — unless `replayWhen` says the write already happened (an idempotent retry
 * after an unknown commit outcome) — record an `attempt:stale-rejected` event and end the stale attempt's
 * row as `rejected_stale`, all in the same statement as the write (invariant 2: never a silent no-op).
 */
export function rejectionCtes(
  n: SchemaNames,
  p: { stepId: string; token: bigint; nonce: string; operation: FencedOperation; replayWhen?: SQL },
): SQL {
  const token = sql`${p.token.toString()}::bigint`;
  return sql`
  cur AS (
    SELECT s.id, s.run_id, s.fencing_token, s.status, s.ended_nonce, s.lease_expires_at <= ${n.now} AS expired
      FROM ${n.steps} s
     WHERE s.id = ${p.stepId} AND NOT EXISTS (SELECT 1 FROM applied)
       FOR SHARE OF s),
  replayed AS (SELECT 1 FROM cur WHERE ${p.replayWhen ?? sql`false`}),
  rej AS (
    INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, at)
    SELECT cur.run_id, cur.id, 'attempt:stale-rejected', a.attempt, a.epoch, ${token}, a.worker_id,
           jsonb_build_object(
             'operation', ${p.operation}::text,
             'staleToken', ${p.token.toString()}::text,
             'currentToken', cur.fencing_token::text,
             'reason', CASE WHEN cur.fencing_token IS DISTINCT FROM ${token} THEN 'superseded'
                            WHEN cur.status <> 'running' THEN cur.status
                            ELSE 'expired' END),
           ${n.now}
      FROM cur LEFT JOIN ${n.attempts} a ON a.fencing_token = ${token}
     WHERE NOT EXISTS (SELECT 1 FROM replayed)
    RETURNING data),
  rej_attempt AS (
    UPDATE ${n.attempts} SET outcome = coalesce(outcome, 'rejected_stale'), ended_at = coalesce(ended_at, ${n.now})
     WHERE fencing_token = ${token} AND EXISTS (SELECT 1 FROM rej)
    RETURNING 1)`;
}

/** The columns a statement built with {@link rejectionCtes} selects last. */
export const fencedResultColumns = sql`
  (SELECT count(*) FROM applied)::int AS applied,
  (SELECT count(*) FROM replayed)::int AS replayed,
  (SELECT fencing_token::text FROM cur) AS current_token,
  (SELECT data->>'reason' FROM rej) AS reason,
  (SELECT count(*) FROM rej_attempt)::int AS rejected_attempts`;

export interface FencedResultRow {
  applied: number;
  replayed: number;
  current_token: string | null;
  reason: string | null;
}

/** What a fenced write's caller knows about the attempt, for the error message. */
export interface AttemptRef {
  readonly runId: string;
  readonly stepId: string;
  readonly stepLabel: string;
  readonly attempt: number;
  readonly token: bigint;
}

/**
 * Interpret the result of a fenced write: `'applied'`, `'replayed'` (an idempotent retry of a write that had
 * committed), or throw {@link LeaseLostError} with the stale and current token.
 */
export function settleFencedResult(
  row: FencedResultRow | undefined,
  ref: AttemptRef,
  operation: FencedOperation,
): 'applied' | 'replayed' {
  if (row && row.applied > 0) return 'applied';
  if (row && row.replayed > 0) return 'replayed';
  throw new LeaseLostError({
    operation,
    stepLabel: ref.stepLabel,
    runId: ref.runId,
    stepId: ref.stepId,
    attempt: ref.attempt,
    staleToken: ref.token,
    currentToken: row?.current_token != null ? BigInt(row.current_token) : null,
    reason: row?.reason ?? 'step not found',
  });
}
