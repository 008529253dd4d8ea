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
  return sql`${a}.id = ${p.stepId}::uuid AND ${a}.fencing_token = ${p.token.toString()}::bigint AND ${a}.nonce = ${p.nonce}::uuid
    AND ${a}.status = 'running' AND ${a}.lease_expires_at > ${n.now}`;
}

/**
 * Why a fenced write of the attempt holding `staleToken` matched nothing, read off the step's latest version
 * `cur` (columns `fencing_token`, `status`, `retired_at`) — DESIGN.md §4 invariant 12:
 * - `retired`: a retry withdrew the step from the run's history (a successor may re-run the same position);
 * - `superseded`: another claim took the step (its token belongs to an attempt), or a retry reset it for one;
 * - `expired`: the lease ran out — the step is still running under this token, or expiry maintenance ended it
 *   (which bumps the token without a claim, so that token has no attempt row);
 * - `cancelled`: the run was cancelled or ended under the attempt;
 * - `completed` / `failed`: this attempt's own outcome already ended the step (a second, different outcome).
 * An attempt whose own outcome ended the step is told apart by `ended_nonce` before this is asked.
 */
export function staleReason(n: SchemaNames, cur: string, staleToken: SQL): SQL {
  const c = sql.raw(cur);
  return sql`CASE WHEN ${c}.retired_at IS NOT NULL THEN 'retired'
                  WHEN ${c}.fencing_token IS DISTINCT FROM ${staleToken} THEN
                    CASE WHEN EXISTS (SELECT 1 FROM ${n.attempts} x WHERE x.fencing_token = ${c}.fencing_token)
                         THEN 'superseded' ELSE 'expired' END
                  WHEN ${c}.status = 'cancelled' THEN 'cancelled'
                  WHEN ${c}.status = 'scheduled' THEN 'superseded'
                  WHEN ${c}.status IN ('completed', 'failed') THEN ${c}.status
                  ELSE 'expired' END`;
}

/**
 * A CTE named `run_lock` that locks the run of step `stepId` (`FOR NO KEY UPDATE`) — the first lock of every
 * owner write that ends or changes a step, so that all statements lock a run's rows in one order: the run row
 * first, then its steps by id (DESIGN.md §4 invariant 14). `FOR NO KEY UPDATE` rather than `FOR UPDATE`: the
 * key-share locks that foreign keys take when events or attempts are inserted never wait on it.
 * The statement's write on the step must reference `run_lock` (e.g. `AND s.run_id IN (SELECT id FROM run_lock)`)
 * so that the run is locked before the step row is.
 */
export function runLockCte(n: SchemaNames, stepId: string): SQL {
  return sql`run_lock AS MATERIALIZED (
    SELECT r.id FROM ${n.runs} r
     WHERE r.id = (SELECT run_id FROM ${n.steps} WHERE id = ${stepId}::uuid)
       FOR NO KEY UPDATE OF r)`;
}

/**
 * CTEs appended to a fenced write whose own CTE is named `applied` (and that defines {@link runLockCte}): when the
 * write matched nothing, they lock and read the step's latest committed version (after the run lock; the lock
 * waits for a concurrent claim to commit, so the current token is the real one), and — unless `replayWhen` says
 * the write already happened (an idempotent retry after an unknown commit outcome) — record an
 * `attempt:stale-rejected` event with the {@link staleReason}, end the stale attempt's row as `rejected_stale`
 * (unless something else already ended it) and note that the holder was told ({@link toldCte}), all in the same
 * statement as the write (invariant 2: never a silent no-op).
 */
export function rejectionCtes(
  n: SchemaNames,
  p: { stepId: string; token: bigint; nonce: string; operation: FencedOperation; replayWhen?: SQL },
): SQL {
  const token = sql`${p.token.toString()}::bigint`;
  return sql`
  cur AS (
    SELECT s.id, s.run_id, s.fencing_token, s.status, s.ended_nonce, s.retired_at
      FROM ${n.steps} s
     WHERE s.id = ${p.stepId} AND NOT EXISTS (SELECT 1 FROM applied) AND s.run_id IN (SELECT id FROM run_lock)
       FOR NO KEY UPDATE OF s),
  replayed AS (SELECT 1 FROM cur WHERE ${p.replayWhen ?? sql`false`}),
  rej AS (
    INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, at)
    SELECT cur.run_id, cur.id, 'attempt:stale-rejected', a.attempt, a.epoch, ${token}, a.worker_id,
           jsonb_build_object(
             'operation', ${p.operation}::text,
             'staleToken', ${p.token.toString()}::text,
             'currentToken', cur.fencing_token::text,
             'reason', ${staleReason(n, 'cur', token)}),
           ${n.now}
      FROM cur LEFT JOIN ${n.attempts} a ON a.fencing_token = ${token}
     WHERE NOT EXISTS (SELECT 1 FROM replayed)
    RETURNING data),
  ${toldCte(n, 'cur', token, sql`NOT EXISTS (SELECT 1 FROM replayed) AND cur.ended_nonce IS DISTINCT FROM ${p.nonce}::uuid`)},
  rej_attempt AS (
    UPDATE ${n.attempts} SET outcome = coalesce(outcome, 'rejected_stale'), ended_at = coalesce(ended_at, ${n.now})
     WHERE fencing_token = ${token} AND EXISTS (SELECT 1 FROM rej)
    RETURNING 1)`;
}

/**
 * A CTE named `told`: when the refused attempt is the one the step was ended under (its token is still the
 * step's, the step no longer running — a cancel, the run's end, a retirement — and not by its own outcome, which
 * `when` must exclude), the holder now knows, so the
 * lease it held stops delaying the step's next grant: a retry may grant the position at once instead of waiting
 * for that lease to run out (see retryRun and commitTurn), since the holder's signal has fired on this very
 * refusal (invariant 12: "before or at the successor's grant"). `cur` must be locked for update.
 */
export function toldCte(n: SchemaNames, cur: string, staleToken: SQL, when: SQL): SQL {
  const c = sql.raw(cur);
  return sql`told AS (
    UPDATE ${n.steps} s SET lease_expires_at = least(s.lease_expires_at, ${n.now})
      FROM ${c}
     WHERE s.id = ${c}.id AND ${c}.fencing_token = ${staleToken} AND ${c}.status <> 'running'
       AND s.lease_expires_at > ${n.now} AND ${when}
    RETURNING 1)`;
}

/** The columns a statement built with {@link rejectionCtes} selects last. */
export const fencedResultColumns = sql`
  (SELECT count(*) FROM applied)::int AS applied,
  (SELECT count(*) FROM replayed)::int AS replayed,
  (SELECT fencing_token::text FROM cur) AS current_token,
  (SELECT data->>'reason' FROM rej) AS reason,
  (SELECT count(*) FROM rej_attempt)::int AS rejected_attempts,
  (SELECT count(*) FROM told)::int AS told`;

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
  throw leaseLostFromRow(row, ref, operation);
}

/**
 * The {@link LeaseLostError} for a rejected fenced write, from the row its statement answered (`current_token`
 * and `reason`, as {@link rejectionCtes} and the heartbeat statement report them): the one place it is built.
 */
export function leaseLostFromRow(
  row: { current_token: string | null; reason: string | null } | undefined,
  ref: AttemptRef,
  operation: FencedOperation,
): LeaseLostError {
  return new LeaseLostError({
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
