import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';

/**
 * The one write of the run row (`run_row`, already locked by `runLockCtes`): its end, or its next turn (now if
 * anything woke it since the claim, else its earliest timer: `waiting`, `next_timer`, `signal_due`), and, for a fused
 * step, the turn's grant; then the turn's attempt row ends (`turn_attempt`; a fused step inserts it), `failed` when
 * the turn failed the run.
 */
export function runRowCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const {
    grant,
    fused,
    runId,
    wakeCount,
    ending,
    status,
    output,
    error,
    progress,
    rejecting,
    settledSignalsArray,
    childKeys,
    signalsTaken,
  } = plan;
  // How the turn's attempt ended: `failed` when its code failed the run (it threw, or replay found
  // non-determinism), else `completed` — a turn that ends the run cancelled has done what it was for. A literal of
  // the statement's text, one of two.
  const turnOutcome = sql.raw(status === 'failed' ? `'failed'` : `'completed'`);
  // A turn that ends the run sets no next turn: the earliest timer and the pending signals are not read.
  const nextTurn = ending
    ? sql`NULL`
    : sql`CASE WHEN r.wake_count <> ${wakeCount} THEN (SELECT t FROM clock)
                                     WHEN (SELECT due FROM signal_due) THEN (SELECT t FROM clock)${
                                       childKeys
                                         ? sql`
                                     WHEN EXISTS (SELECT 1 FROM inserted
                                                   WHERE kind = 'child' AND status IN ('failed', 'completed'))
                                       THEN (SELECT t FROM clock)`
                                         : sql``
                                     }
                                     ELSE (SELECT due FROM next_timer) END`;
  return sql`${
    ending
      ? sql``
      : sql`
    -- The run's earliest timer: those it had (less the ones this turn fires) and those this turn starts (a
    -- statement does not see its own inserts).
    waiting AS (
      SELECT s.kind, s.name, s.next_run_at AS due FROM ${n.steps} s
       WHERE s.run_id = ${runId}::uuid AND s.kind IN ('timer', 'signal') AND s.status = 'scheduled'
         AND s.retired_at IS NULL
         AND NOT EXISTS (SELECT 1 FROM dl WHERE dl.id = s.id AND (dl.fires_timer OR dl.signal_id IS NOT NULL))
      UNION ALL
      SELECT kind, name, next_run_at FROM inserted WHERE kind IN ('timer', 'signal') AND status = 'scheduled'),
    -- Timers and signal waits' timeouts, those it had (less the ones this turn ends) and those it starts.
    next_timer AS (SELECT min(due) AS due FROM waiting),
    -- A pending signal that a wait of the run now waits for (one the turn did not see: it came after the turn's
    -- snapshot, or the turn made the wait without reading the run's signals, as a fused step's does).
    signal_due AS (
      SELECT EXISTS (
        SELECT 1 FROM ${n.signals} g
         WHERE g.run_id = ${runId}::uuid AND g.consumed_at IS NULL${
           signalsTaken || rejecting ? sql` AND g.id <> ALL(${settledSignalsArray}::bigint[])` : sql``
         }
           AND EXISTS (SELECT 1 FROM waiting w WHERE w.kind = 'signal' AND w.name = g.name)) AS due),`
  }
    -- The one write of the run row: its end, or its next turn (now if anything woke it since the claim).
    run_row AS (
      UPDATE ${n.runs} r
         SET turn_lease_expires_at = NULL,
             status = coalesce(${status}::text, ${fused ? sql`'running'` : sql`r.status`}),
             output = CASE WHEN ${ending} THEN ${output}::jsonb ELSE r.output END,
             error = CASE WHEN ${ending} THEN ${error}::jsonb ELSE r.error END,
             finished_at = CASE WHEN ${ending} THEN (SELECT t FROM clock) ELSE r.finished_at END,
             progress = CASE WHEN ${progress !== null} THEN ${progress}::jsonb ELSE r.progress END,
             turn_next_run_at = ${nextTurn}${
               fused
                 ? sql`,
             -- A fused step grants its turn here, as claimTurns grants one (see commitFusedTurn).
             turn_token = (SELECT token FROM turn_grant), turn_nonce = (SELECT nonce FROM turn_grant),
             turn_epoch = r.turn_epoch + 1,
             turn_attempt = r.turn_attempt + 1, turn_worker_id = ${fused.workerId},
             started_at = coalesce(r.started_at, (SELECT t FROM clock))`
                 : sql``
             }
       WHERE r.id = (SELECT id FROM go)
      RETURNING r.id, r.queue, r.turn_next_run_at <= (SELECT t FROM clock) AS due_now, r.status, r.output, r.error,
                r.cancel_reason, r.turn_token, r.turn_nonce, r.turn_epoch, r.turn_attempt,
                r.parent_step_id, r.concurrency_key),
    turn_attempt AS (${
      grant.kind === 'claimed'
        ? sql`
      UPDATE ${n.attemptRecords} SET outcome = ${turnOutcome}, ended_at = (SELECT t FROM clock)
       WHERE fencing_token = ${grant.ref.token.toString()}::bigint AND outcome IS NULL AND EXISTS (SELECT 1 FROM go)`
        : sql`
      INSERT INTO ${n.attemptRecords} (run_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at, outcome,
                                 ended_at)
      SELECT id, 'turn', turn_attempt, turn_epoch, turn_token, turn_nonce, ${grant.fused.workerId}, (SELECT t FROM clock),
             ${turnOutcome}, (SELECT t FROM clock)
        FROM run_row`
    }
      RETURNING 1),`;
}

/**
 * With progress set: the `run:progress` event when the value changed (`progress_event`). Takes no lock.
 */
export function progressEventCte(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, progress } = plan;
  return sql`
    ${
      progress !== null
        ? sql`-- What the turn set with ctx.setProgress, as an event too (what handle.watch() streams) when it changed:
    -- a turn that replayed the code from its start sets again what earlier turns set. The read of runs here sees
    -- the row as the statement's snapshot has it, before run_row's write.
    progress_event AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT id, 'run:progress', jsonb_build_object('value', ${progress}::jsonb), (SELECT t FROM clock) FROM run_row
       WHERE (SELECT p.progress FROM ${n.runs} p WHERE p.id = ${runId}::uuid) IS DISTINCT FROM ${progress}::jsonb
      RETURNING 1),`
        : sql``
    }`;
}
