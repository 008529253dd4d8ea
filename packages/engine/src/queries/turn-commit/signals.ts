import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';

/**
 * Each signal handed to a wait records the step that took it (`consumed`, rows locked by `stepLockCtes`), and its
 * `signal:received` event.
 */
export function takenSignalCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, signalsTaken } = plan;
  return sql`
${
  signalsTaken
    ? sql`
    -- Each signal handed to a wait records the step that took it (the wait's own row holds the payload).
    consumed AS (
      UPDATE ${n.signals} g SET step_id = w.step_id, consumed_at = (SELECT t FROM clock)
        FROM (SELECT signal_id, id AS step_id, seq FROM marked WHERE signal_id IS NOT NULL
              UNION ALL
              SELECT p.signal_id, i.id, i.seq FROM planned p JOIN inserted i ON i.seq = p.seq
               WHERE p.signal_id IS NOT NULL) w
       WHERE g.id = w.signal_id AND g.run_id = ${runId}::uuid
      RETURNING g.id, g.name, w.step_id, w.seq),
    received_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid, step_id, 'signal:received',
             jsonb_build_object('seq', seq, 'name', name, 'signalId', id::text), true, (SELECT t FROM clock)
        FROM consumed
      RETURNING 1),`
    : sql``
}`;
}

/**
 * Each signal a wait refused (its payload does not fit the wait's schema) is undelivered, with why (`refused`,
 * `refused_events`). Locks the refused signals' rows by the UPDATE, after the run's row and steps.
 */
export function refusedSignalCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, rejected, rejecting } = plan;
  return sql`
${
  rejecting
    ? sql`
    -- Each signal a wait refused (its payload does not fit the wait's schema) is undelivered, with why; the wait
    -- goes on waiting, and no later turn sees the signal.
    refused AS (
      UPDATE ${n.signals} g
         SET consumed_at = (SELECT t FROM clock),
             undelivered = jsonb_build_object('reason', 'invalid-payload', 'seq', x.seq, 'message', x.message)
        FROM jsonb_to_recordset(${JSON.stringify(rejected)}::jsonb) AS x("signalId" bigint, seq int, message text)
       WHERE g.id = x."signalId" AND g.run_id = ${runId}::uuid AND g.consumed_at IS NULL AND EXISTS (SELECT 1 FROM go)
      RETURNING g.id, g.name, x.seq, x.message),
    refused_events AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, terminal, at)
      SELECT ${runId}::uuid,
             coalesce((SELECT i.id FROM inserted i WHERE i.seq = f.seq),
                      (SELECT s.id FROM ${n.steps} s
                        WHERE s.run_id = ${runId}::uuid AND s.seq = f.seq AND s.retired_at IS NULL)),
             'signal:rejected',
             jsonb_build_object('seq', f.seq, 'name', f.name, 'signalId', f.id::text, 'message', f.message), false,
             (SELECT t FROM clock)
        FROM refused f
      RETURNING 1),`
    : sql``
}`;
}

/**
 * A run that ends leaves no signal pending (`unseen`, `unseen_events`): each one no wait took is undelivered. Locks
 * those signals' rows by the UPDATE, after the run's row and steps; a sender stores a signal under the run's row
 * lock, so none can be added meanwhile.
 */
export function unseenSignalCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { runId, ending, status, settledSignalsArray } = plan;
  return sql`${
    ending
      ? sql`
    -- A run that ends leaves no signal pending: each one no wait took is undelivered, the run's end its reason. A
    -- signal is stored under the run's row lock while the run goes on (sendSignal), so every signal is stored
    -- before this end, and marked here, or refused by its sender as RUN_ENDED.
    unseen AS (
      UPDATE ${n.signals} g
         SET consumed_at = (SELECT t FROM clock),
             undelivered = jsonb_build_object('reason', 'run-ended', 'status', ${status}::text)
       WHERE g.run_id = ${runId}::uuid AND g.consumed_at IS NULL AND EXISTS (SELECT 1 FROM go)
         AND g.id <> ALL(${settledSignalsArray}::bigint[])
      RETURNING g.id, g.name),
    unseen_events AS (
      INSERT INTO ${n.events} (run_id, type, data, terminal, at)
      SELECT ${runId}::uuid, 'signal:undelivered',
             jsonb_build_object('name', name, 'signalId', id::text, 'reason', 'run-ended', 'status', ${status}::text),
             false, (SELECT t FROM clock)
        FROM unseen
      RETURNING 1),`
      : sql``
  }`;
}
