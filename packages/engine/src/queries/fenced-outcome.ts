import { sql, type SQL } from 'drizzle-orm';
import { LeaseLostError, type FencedOperation } from '@palisade/sdk';
import type { SchemaNames } from './schema-names.js';
import { jsonRowsLimit } from './row-estimates.js';

/**
 * A column of the refused attempt for its `attempt:stale-rejected` event, in {@link rejectionCtes}: off its
 * attempts row (`a`), or off the step (`cur`) when the refused attempt is still the step's grant and no row records
 * it (migration 0029).
 */
export const staleAttempt = (column: 'attempt' | 'epoch' | 'worker_id'): SQL =>
  sql`coalesce(a.${sql.raw(column)}, CASE WHEN cur.fencing_token = cur.stale_token AND cur.claimed_at IS NOT NULL
                                         THEN cur.${sql.raw(column)} END)`;

/**
 * The fence every owner write of a step repeats (DESIGN.md §4 invariant 2): equality on token and nonce, lease
 * unexpired at `at` (default: now). A statement that may wait for the step's lock passes the clock it read after
 * taking that lock (see {@link runLockCte}'s `lock_clock`).
 */
export function stepFence(
  n: SchemaNames,
  alias: string,
  p: { stepId: string; token: bigint; nonce: string },
  at: SQL = n.now,
): SQL {
  const a = sql.raw(alias);
  return sql`${a}.id = ${p.stepId}::uuid AND ${a}.fencing_token = ${p.token.toString()}::bigint AND ${a}.nonce = ${p.nonce}::uuid
    AND ${a}.status = 'running' AND ${a}.lease_expires_at > ${at}`;
}

/**
 * Why a fenced write of the attempt holding `staleToken` matched nothing, read off the step's latest version
 * `cur` (columns `fencing_token`, `status`, `retired_at`, `claimed_at`) — DESIGN.md §4 invariant 12:
 * - `retired`: a retry withdrew the step from the run's history (a successor may re-run the same position);
 * - `superseded`: another claim took the step (its token is a claim's: `claimed_at` set, or, for a grant made
 *   before migration 0029, an attempts row), or a retry reset it for one;
 * - `expired`: the lease ran out — the step is still running under this token, or expiry maintenance ended it
 *   (which bumps the token without a claim, so that token has no attempt);
 * - `cancelled`: the run was cancelled or ended under the attempt;
 * - `completed` / `failed`: this attempt's own outcome already ended the step (a second, different outcome).
 * An attempt whose own outcome ended the step is told apart by `ended_nonce` before this is asked.
 */
export function staleReason(n: SchemaNames, cur: string, staleToken: SQL): SQL {
  const c = sql.raw(cur);
  return sql`CASE WHEN ${c}.retired_at IS NOT NULL THEN 'retired'
                  WHEN ${c}.fencing_token IS DISTINCT FROM ${staleToken} THEN
                    CASE WHEN ${c}.claimed_at IS NOT NULL
                              OR EXISTS (SELECT 1 FROM ${n.attemptRecords} x WHERE x.fencing_token = ${c}.fencing_token)
                         THEN 'superseded' ELSE 'expired' END
                  WHEN ${c}.status = 'cancelled' THEN 'cancelled'
                  WHEN ${c}.status = 'scheduled' THEN 'superseded'
                  WHEN ${c}.status IN ('completed', 'failed') THEN ${c}.status
                  ELSE 'expired' END`;
}

/**
 * An attempt as the fenced writes take it: the step, and the token and nonce of the claim that granted it.
 * The statements that end or change a step are written over a set of attempts (the CTE `inp`), so one statement
 * text serves one attempt and a batch alike.
 */
export interface FencedInput {
  readonly stepId: string;
  readonly token: bigint;
  readonly nonce: string;
}

/**
 * The CTE `inp` (`step_id`, `token`, `nonce`, `payload`, `ord` from 1 in the order given) from a batch of
 * attempts, each with an optional jsonb `payload` (an output). The batch is one jsonb parameter, so the text does
 * not change with its size and stays one prepared statement.
 */
export function fencedInputCte(items: readonly (FencedInput & { readonly payload?: unknown })[]): SQL {
  const rows = JSON.stringify(
    items.map((i) => ({ s: i.stepId, t: i.token.toString(), n: i.nonce, p: i.payload ?? null })),
  );
  return sql`inp AS MATERIALIZED (
    SELECT (e->>'s')::uuid AS step_id, (e->>'t')::bigint AS token, (e->>'n')::uuid AS nonce, e->'p' AS payload,
           ord::int AS ord
      FROM jsonb_array_elements(${rows}::jsonb) WITH ORDINALITY AS x(e, ord)${jsonRowsLimit(items.length)})`;
}

/**
 * The fence of a set-based write over `inp` (alias `i`) on step alias `a`: equality on token and nonce, still
 * running, lease unexpired (DESIGN.md §4 invariant 2). Only in a statement with {@link runLockCte}: the lease is
 * judged at `lock_clock`, the clock read once every lock of the statement is held.
 */
export function stepFenceOnInput(_n: SchemaNames, alias: string): SQL {
  const a = sql.raw(alias);
  return sql`${a}.id = i.step_id AND ${a}.fencing_token = i.token AND ${a}.nonce = i.nonce
    AND ${a}.status = 'running' AND ${a}.lease_expires_at > (SELECT now_at FROM lock_clock)`;
}

/**
 * CTEs named `run_lock` and `step_lock` that lock the runs of the steps in `inp` (`FOR NO KEY UPDATE`, in run id
 * order; `run_lock` holds each run's newest version, as a locking read returns it, with its `xmin`) and then those
 * steps (in step id order) — the first locks of every owner write that ends or changes a
 * step, so that all statements lock a run's rows in one order: the run rows first, then their steps by id
 * (DESIGN.md §4 invariant 14). A batch's steps must be locked here, in id order, before its UPDATE touches them:
 * the UPDATE's join visits them in any order, and a heartbeat locking the same worker's steps by id would then
 * close a cycle with it (seen: deadlocks under the lock-order stress test). `FOR NO KEY UPDATE` rather than
 * `FOR UPDATE`: the lock the UPDATE takes anyway, as it changes no key.
 * The statement's write on the step must reference `step_lock` (e.g. `AND s.id IN (SELECT id FROM step_lock)`)
 * so that the locks are taken before the write.
 *
 * `lock_clock` (`now_at`) is `<schema>.now()` read once `step_lock` holds all its rows, for the fence to judge
 * leases by ({@link stepFenceOnInput}). Read in the write's own WHERE, the clock may be read before the locks: the
 * planner may scan the steps (evaluating the fence) before it reads `step_lock`, and a wait on a row that its
 * holder only locked, never changed, triggers no recheck. A statement that waited on a run's lock past the
 * lease then completed the step under an expired lease (seen: chaos T16, a SIGKILLed worker's batched completion
 * blocked on a run lock until every lease had expired, committed every row).
 */
export const runLockCte = (n: SchemaNames): SQL => sql`run_lock AS MATERIALIZED (
    SELECT r.id, r.kind, r.status, r.name, r.queue, r.turn_lease_expires_at, r.turn_token, r.turn_worker_id,
           r.concurrency_key, r.xmin::text AS locked_xmin
      FROM ${n.runs} r
     WHERE r.id IN (SELECT s.run_id FROM ${n.steps} s WHERE s.id IN (SELECT step_id FROM inp))
     ORDER BY r.id
       FOR NO KEY UPDATE OF r),
  step_lock AS MATERIALIZED (
    SELECT s.id FROM ${n.steps} s
     WHERE s.id IN (SELECT step_id FROM inp) AND s.run_id IN (SELECT id FROM run_lock)
     ORDER BY s.id
       FOR NO KEY UPDATE OF s),
  lock_clock AS MATERIALIZED (SELECT ${n.now} AS now_at FROM (SELECT count(*) FROM step_lock) locked)`;

/**
 * CTEs appended to a fenced write over `inp` whose own CTE is named `applied` (returning the step `id` and its
 * `fencing_token`, and defining {@link runLockCte}): for each input row the write did not apply, they lock and
 * read the step's latest committed version as `cur` (after the run lock; the lock waits for a concurrent claim to
 * commit, so the current token is the real one), and — unless `replayWhen` (over `cur`, with the input's
 * `stale_token` and `stale_nonce`) says the write already happened (an idempotent retry after an unknown commit
 * outcome) — record an `attempt:stale-rejected` event with the {@link staleReason}, end the stale attempt's
 * row as `rejected_stale` if it has one still open (a grant recorded before migration 0029; since then an attempt
 * that is still its step's grant has no row, and keeps it open until a claim or the expiry sweep ends it), and note that the holder was told ({@link toldCte}),
 * all in the same statement as the write (invariant 2: never a silent no-op). Each row is judged on its own: a
 * stale row never fails its neighbours. A batch holds at most one row per step.
 */
export function rejectionCtes(n: SchemaNames, p: { operation: FencedOperation; replayWhen?: SQL }): SQL {
  return sql`
  cur AS (
    SELECT s.id, s.run_id, s.fencing_token, s.status, s.ended_nonce, s.retired_at, s.attempt, s.epoch,
           s.worker_id, s.claimed_at,
           i.token AS stale_token, i.nonce AS stale_nonce
      FROM inp i JOIN ${n.steps} s ON s.id = i.step_id
     WHERE i.step_id NOT IN (SELECT id FROM applied) AND s.id IN (SELECT id FROM step_lock)
       FOR NO KEY UPDATE OF s),
  replayed AS (SELECT cur.id FROM cur WHERE ${p.replayWhen ?? sql`false`}),
  rej AS (
    INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, at)
    SELECT cur.run_id, cur.id, 'attempt:stale-rejected', ${staleAttempt('attempt')}, ${staleAttempt('epoch')},
           cur.stale_token, ${staleAttempt('worker_id')},
           jsonb_build_object(
             'operation', ${p.operation}::text,
             'staleToken', cur.stale_token::text,
             'currentToken', cur.fencing_token::text,
             'reason', ${staleReason(n, 'cur', sql`cur.stale_token`)}),
           ${n.now}
      FROM cur LEFT JOIN ${n.attemptRecords} a ON a.fencing_token = cur.stale_token
     WHERE cur.id NOT IN (SELECT id FROM replayed)
    RETURNING step_id, fencing_token, data),
  ${toldCte(n, 'cur', sql`cur.stale_token`, sql`cur.id NOT IN (SELECT id FROM replayed) AND cur.ended_nonce IS DISTINCT FROM cur.stale_nonce`)},
  rej_attempt AS (
    UPDATE ${n.attemptRecords} SET outcome = coalesce(outcome, 'rejected_stale'), ended_at = coalesce(ended_at, ${n.now})
     WHERE fencing_token IN (SELECT fencing_token FROM rej)
    RETURNING 1)`;
}

/**
 * CTEs named `told` and `told_successors`: when the refused attempt is the one the step was ended under (its token
 * is still the step's, the step no longer running — a cancel, the run's end, a retirement, a retry's reset — and
 * not by its own outcome, which `when` must exclude), the holder now knows, so the lease it held stops delaying
 * the position's next grant (invariant 12: "before or at the successor's grant"; the holder's signal has fired on
 * this very refusal):
 * - `told` cuts the ended row's lease short, so a retry or a re-creation that comes later grants at once (see
 *   retryRun and commitTurn, which wait for the leases of rows ended under a holder);
 * - `told_successors` makes due now the scheduled activity that already waits for that lease at the same
 *   position: the row a retry reset (it keeps the holder's token) or the row re-created at a retired position (no
 *   token yet) — unless another retired row there is still held by an attempt not told, whose lease it then waits
 *   for — and wakes the workers of its queue. It locks that row `SKIP LOCKED`: it never waits, so it takes part in
 *   no deadlock (this row may precede the refused one in id order); a row another statement holds keeps its due
 *   time, the lease end — the safe side.
 * Seen before `told_successors`: a successor that a retry scheduled before the holder was told waited for the
 * holder's whole lease (28 s of a 30 s lease). `cur` must be locked for update.
 */
export function toldCte(n: SchemaNames, cur: string, staleToken: SQL, when: SQL): SQL {
  const c = sql.raw(cur);
  return sql`told AS (
    UPDATE ${n.steps} s SET lease_expires_at = least(s.lease_expires_at, ${n.now})
      FROM ${c}
     WHERE s.id = ${c}.id AND ${c}.fencing_token = ${staleToken} AND ${c}.status <> 'running'
       AND s.lease_expires_at > ${n.now} AND ${when}
    RETURNING 1),
  told_next AS MATERIALIZED (
    SELECT s.id, e.id AS told_id
      FROM ${c} JOIN ${n.steps} e ON e.id = ${c}.id
      JOIN ${n.steps} s ON s.run_id = e.run_id AND s.seq = e.seq
     WHERE ${c}.fencing_token = ${staleToken} AND ${c}.status <> 'running' AND ${when}
       AND s.retired_at IS NULL AND s.kind = 'activity' AND s.status = 'scheduled'
       AND (s.fencing_token IS NULL OR s.fencing_token = ${staleToken})
       AND s.next_run_at > ${n.now} AND (s.lease_expires_at IS NULL OR s.lease_expires_at <= ${n.now})
       FOR NO KEY UPDATE OF s SKIP LOCKED),
  told_successors AS (
    UPDATE ${n.steps} s
       SET next_run_at = greatest(${n.now}, (
             SELECT max(h.lease_expires_at) FROM ${n.steps} h
              WHERE h.run_id = s.run_id AND h.seq = s.seq AND h.id <> t.told_id AND h.id <> s.id
                AND h.retired_at IS NOT NULL AND h.ended_nonce IS DISTINCT FROM h.nonce
                AND h.lease_expires_at > ${n.now}))
      FROM told_next t
     WHERE s.id = t.id
    RETURNING pg_notify(${n.channel}, 'step:' || s.queue))`;
}

/** The columns, per input row, that a statement built with {@link rejectionCtes} selects last (`FROM inp i`). */
export const fencedResultColumns = sql`
  i.ord,
  EXISTS (SELECT 1 FROM applied WHERE applied.id = i.step_id AND applied.fencing_token = i.token) AS applied,
  EXISTS (SELECT 1 FROM replayed WHERE replayed.id = i.step_id) AS replayed,
  (SELECT cur.fencing_token::text FROM cur WHERE cur.id = i.step_id) AS current_token,
  (SELECT rej.data->>'reason' FROM rej WHERE rej.step_id = i.step_id) AS reason`;

export interface FencedResultRow {
  ord: number;
  applied: boolean;
  replayed: boolean;
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
  if (row?.applied) return 'applied';
  if (row?.replayed) return 'replayed';
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
