import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import {
  fencedInputCte,
  fencedResultColumns,
  rejectionCtes,
  runLockCte,
  settleFencedResult,
  stepFenceOnInput,
  type AttemptRef,
  type FencedResultRow,
} from './fenced-outcome.js';
import { endedRunItems, notifyOnce } from './notify.js';
import { grantedTurnJson, historyNews, type ClaimedTurnRow } from './claim-turns.js';
import { msInterval, type SchemaNames } from './schema-names.js';
import { liveRunStatuses } from './status-sql.js';

export interface CompleteStepParams extends AttemptRef {
  readonly nonce: string;
  readonly output: unknown;
}

/**
 * What lets a completion also claim the next turn of the workflow runs it wakes, for the completing worker
 * (an eager turn): the worker's id, the workflows and queues whose turns it runs, how many turns it can start
 * now (0: none), and the turn lease (ms).
 */
export interface EagerTurns {
  readonly workerId: string;
  readonly workflowNames: readonly string[];
  readonly queues: readonly string[];
  readonly limit: number;
  readonly leaseMs: number;
  /** Whether the worker keeps workflow instances: only then does an eager turn carry the run's news. */
  readonly keepsInstances: boolean;
}

/** The answer of a batch: one row per attempt, and the turns it claimed for the worker. */
export interface CompletedBatch {
  readonly rows: FencedResultRow[];
  readonly eagerTurns: ClaimedTurnRow[];
}

/** No eager turns: a limit of 0 (the completion claims no turn; a start grants none). */
export const NO_EAGER_TURNS: EagerTurns = {
  workerId: '',
  workflowNames: [],
  queues: [],
  limit: 0,
  leaseMs: 0,
  keepsInstances: false,
};

/**
 * Record the results of a batch of attempts (invariant 4; I3, I7) in one statement that fences every row on its
 * own: for each attempt whose fence holds, set its step `completed` with its output (the attempt's end is read off
 * it: no attempts row, migration 0029), complete a standalone run or wake a workflow run's next turn, and
 * send one NOTIFY for the whole batch (result waiters, turn queues: {@link notifyOnce}). The step's terminal
 * `step:completed` event and a job's `run:completed` are not stored: the `run_events` view reads them off the
 * step and run rows (migrations 0008 and 0010). A row whose fence fails
 * because this very attempt's completion already committed (`ended_nonce` is its own and the step is
 * `completed`) is `replayed`; any other such row is rejected and recorded in the same statement, without
 * touching its neighbours. The input is one jsonb parameter, so one prepared statement serves every batch size.
 * Locks, in the one order (invariant 14): the runs (`run_lock`, by id), then the steps (`step_lock`, by id).
 * @param batch at most one attempt per step.
 * @returns one row per attempt, in the order given.
 */
export async function completeSteps(
  db: Database,
  n: SchemaNames,
  batch: readonly CompleteStepParams[],
  eager: EagerTurns = NO_EAGER_TURNS,
): Promise<CompletedBatch> {
  // The clock once every lock is held, read once per statement: the fence judges leases by it, and every time this
  // statement records (a step's and a run's end, an attempt's, a wake-up) is it, not a call per row.
  const lockNow = sql`(SELECT now_at FROM lock_clock)`;
  const rows = await db.rows<FencedResultRow & { eager_turns: ClaimedTurnRow[] | null }>(sql`
    WITH ${fencedInputCte(batch.map((p) => ({ ...p, payload: p.output ?? null })))},
    ${runLockCte(n)},
    applied AS (
      UPDATE ${n.steps} s
         SET status = 'completed', error = NULL, ended_nonce = s.nonce,
             -- A job's output is stored once, on its run (see job-run.ts).
             output = CASE WHEN s.run_id IN (SELECT id FROM run_lock WHERE kind = 'activity') THEN NULL
                           ELSE i.payload END,
             finished_at = ${lockNow}, next_run_at = NULL
        FROM inp i
       WHERE ${stepFenceOnInput(n, 's')} AND s.id IN (SELECT id FROM step_lock)
      RETURNING s.id, s.run_id, s.seq, s.kind, s.name, s.attempt, s.epoch, s.fencing_token, s.worker_id,
                s.finished_at, i.payload AS output, s.queue, s.concurrency_key),
    finished_run AS (
      UPDATE ${n.runs} r SET status = 'completed', output = applied.output, finished_at = ${lockNow}
        FROM applied
       WHERE r.id = applied.run_id AND r.kind = 'activity' AND r.status IN ${liveRunStatuses}
      RETURNING r.id),
    -- Eager turns: of the workflow runs this batch wakes, those whose turns the worker runs and whose turn no one
    -- holds, as many as it can start now, judged on each run's newest version (locked in run_lock).
    eager_pick AS MATERIALIZED (
      SELECT rl.id, rl.turn_token AS prev_token,
             ${eager.keepsInstances}::boolean AND rl.turn_worker_id IS NOT DISTINCT FROM ${eager.workerId} AS ran_last_turn,
             rl.locked_xmin
        FROM run_lock rl
       WHERE rl.id IN (SELECT run_id FROM applied) AND rl.kind = 'workflow' AND rl.status IN ${liveRunStatuses}
         AND rl.name IN (SELECT jsonb_array_elements_text(${JSON.stringify(eager.workflowNames)}::jsonb))
         AND rl.queue IN (SELECT jsonb_array_elements_text(${JSON.stringify(eager.queues)}::jsonb))
         AND (rl.turn_lease_expires_at IS NULL OR rl.turn_lease_expires_at <= ${lockNow})
         -- Not the first turn of a run under a concurrency key (a retried one is pending again): a claim admits it.
         AND (rl.concurrency_key IS NULL OR rl.status <> 'pending')
       ORDER BY rl.id
       LIMIT ${eager.limit}),
    -- Every woken run is due now; an eagerly picked one is also claimed, as claimTurns claims: a fresh token from
    -- the global sequence, a fresh nonce, turn epoch and attempt + 1, a turn lease from the database clock.
    woken_run AS (
      UPDATE ${n.runs} r
         SET turn_next_run_at = least(coalesce(r.turn_next_run_at, ${lockNow}), ${lockNow}),
             wake_count = r.wake_count + 1,
             turn_token = CASE WHEN e.id IS NOT NULL THEN ${n.nextToken} ELSE r.turn_token END,
             turn_nonce = CASE WHEN e.id IS NOT NULL THEN gen_random_uuid() ELSE r.turn_nonce END,
             turn_epoch = r.turn_epoch + CASE WHEN e.id IS NOT NULL THEN 1 ELSE 0 END,
             turn_attempt = r.turn_attempt + CASE WHEN e.id IS NOT NULL THEN 1 ELSE 0 END,
             turn_worker_id = CASE WHEN e.id IS NOT NULL THEN ${eager.workerId} ELSE r.turn_worker_id END,
             turn_lease_expires_at = CASE WHEN e.id IS NOT NULL
                                          THEN ${lockNow} + ${msInterval(sql`${eager.leaseMs}::int`)}
                                          ELSE r.turn_lease_expires_at END,
             status = CASE WHEN e.id IS NOT NULL THEN 'running' ELSE r.status END,
             started_at = CASE WHEN e.id IS NOT NULL THEN coalesce(r.started_at, ${lockNow}) ELSE r.started_at END
        FROM run_lock rl LEFT JOIN eager_pick e ON e.id = rl.id
       WHERE r.id = rl.id AND r.id IN (SELECT run_id FROM applied) AND r.kind = 'workflow'
         AND r.status IN ${liveRunStatuses}
      RETURNING r.id, r.queue, e.id IS NOT NULL AS eager, r.name, r.priority, r.input, r.turn_attempt, r.turn_epoch,
                r.turn_token, r.turn_nonce, r.wake_count, r.cancel_requested_at, r.cancel_reason,
                r.turn_lease_expires_at, r.started_at, e.prev_token, coalesce(e.ran_last_turn, false) AS ran_last_turn,
                -- What is new in the run's history (see claimTurns): only when the snapshot's run row is the
                -- version locked, so the snapshot's steps are complete; this batch's own completions are added.
                coalesce(e.ran_last_turn AND e.locked_xmin = (SELECT x.xmin::text FROM ${n.runs} x WHERE x.id = r.id), false)
                  AS sticky),
    ended_turns AS (
      UPDATE ${n.attemptRecords} a SET outcome = 'lease_expired', ended_at = ${lockNow}
        FROM woken_run w WHERE w.eager AND a.fencing_token = w.prev_token AND a.outcome IS NULL
      RETURNING 1),
    turn_attempts AS (
      INSERT INTO ${n.attemptRecords} (run_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at)
      SELECT id, 'turn', turn_attempt, turn_epoch, turn_token, turn_nonce, ${eager.workerId}, ${lockNow}
        FROM woken_run WHERE eager
      RETURNING 1),
    eager_turns AS (
      SELECT jsonb_agg(${grantedTurnJson(n, sql`w`, {
        nowMs: sql`(extract(epoch FROM ${lockNow}) * 1000)::float8`,
        ranLastTurn: sql`w.ran_last_turn`,
        historyNews: sql`CASE WHEN w.sticky THEN jsonb_set(h.news, '{fresh}', (h.news->'fresh') || coalesce((
                 SELECT jsonb_agg(jsonb_build_object(
                          'id', a.id::text, 'seq', a.seq, 'kind', a.kind, 'name', a.name, 'status', 'completed',
                          'output', a.output, 'error', NULL, 'delivered_seq', NULL, 'due_ms', NULL,
                          'finished_ms', (extract(epoch FROM a.finished_at) * 1000)::float8) ORDER BY a.seq)
                   FROM applied a WHERE a.run_id = w.id), '[]'::jsonb)) END`,
      })}) AS turns
        FROM woken_run w
        LEFT JOIN LATERAL (${historyNews(n, sql`w.id`, sql`(extract(epoch FROM ${lockNow}) * 1000)::float8`, sql`w.sticky`)}) h ON true
       WHERE w.eager),
    ${notifyOnce(
      n,
      'notified',
      // A step under a concurrency key gives its place back: wake the claims of its queue, as a claim made while it
      // ran has skipped the steps waiting for that place (flow-control.ts).
      sql`${endedRunItems(n, sql`finished_run`)} UNION ALL SELECT 'turn:' || queue FROM woken_run WHERE NOT eager
          UNION ALL SELECT 'step:' || queue FROM applied WHERE concurrency_key IS NOT NULL`,
    )},
    ${rejectionCtes(n, { operation: 'complete', replayWhen: sql`cur.status = 'completed' AND cur.ended_nonce = cur.stale_nonce AND cur.fencing_token = cur.stale_token` })}
    SELECT ${fencedResultColumns},
           CASE WHEN i.ord = 1 THEN (SELECT turns FROM eager_turns) END AS eager_turns,
           (SELECT count(*) FROM ended_turns)
             + (SELECT count(*) FROM turn_attempts) + (SELECT count(*) FROM notified) AS effects
      FROM inp i ORDER BY i.ord`);
  return { rows, eagerTurns: rows[0]?.eager_turns ?? [] };
}

/**
 * Record one attempt's result: {@link completeSteps} with a batch of one.
 * @returns `'applied'`, or `'replayed'` when this attempt's completion had already committed.
 * @throws LeaseLostError when the attempt no longer holds the step (recorded as `attempt:stale-rejected`).
 */
export async function completeStep(
  db: Database,
  n: SchemaNames,
  p: CompleteStepParams,
): Promise<'applied' | 'replayed'> {
  const {
    rows: [row],
  } = await completeSteps(db, n, [p]);
  return settleFencedResult(row, p, 'complete');
}

/** Where a completed activity step stands in its workflow: its position and activity name (for a fused step). */
export interface StepPosition {
  readonly seq: number;
  readonly name: string;
}

/** The attempt of a completion, without its nonce and output (what a fault hook is shown). */
export function attemptRefOf(p: CompleteStepParams): AttemptRef {
  return { runId: p.runId, stepId: p.stepId, stepLabel: p.stepLabel, attempt: p.attempt, token: p.token };
}
