import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';

/**
 * The gate every write of the commit waits for (`gate`, `go`, and a fused step's `turn_grant`): the fence held,
 * no conflict (a cancel requested after the claim, a timer or signal wait the turn saw fire changed since, a signal
 * it hands out taken meanwhile, a wake-up the run's end would miss), and, for a fused step, its completion's own
 * fence. Takes no lock: `go` waits for every lock of `locked` (through `step_clock`), so no write locks a step
 * before those are all held, in id order. A fused step's turn token is drawn here, before the tokens its commit
 * grants eagerly.
 */
export function gateCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { fused, runId, ending, cancelSensitive, takenSignals, signalsTaken } = plan;
  return sql`
    gate AS MATERIALIZED (
      SELECT f.id, f.queue,
             (f.cancel_requested AND ${cancelSensitive})
             OR EXISTS (SELECT 1 FROM dl LEFT JOIN locked l ON l.id = dl.id
                         WHERE (dl.fires_timer OR dl.signal_id IS NOT NULL) AND l.status IS DISTINCT FROM 'scheduled')
             ${
               signalsTaken
                 ? sql`OR (SELECT count(*) FROM taken WHERE consumed_at IS NULL) <> ${takenSignals.length}::int`
                 : sql``
             }${
               ending
                 ? sql`
             -- A run's end marks every signal still pending undelivered, as this statement's snapshot has them: a
             -- signal whose sender held the run row while the statement started is not in it (its wake_count is in
             -- the locked row, not in the snapshot's). The turn runs again, and its commit sees the signal.
             OR f.wake_count <> (SELECT r.wake_count FROM ${n.runs} r WHERE r.id = ${runId}::uuid)`
                 : sql``
             } AS conflict
        FROM fence f),
    -- Every write of the commit waits for go, and go for every lock of locked (step_clock counts them): no write
    -- may lock a step before the steps locked here are all held, in id order (seen: deadlocks with heartbeats when
    -- the deliveries were marked before the run's other live steps were locked).
    go AS MATERIALIZED (
      SELECT id, queue FROM gate WHERE NOT conflict AND (SELECT t FROM step_clock) IS NOT NULL AND ${stepFence(plan)}),${
        fused
          ? sql`
    -- A fused step's turn grant, taken before the steps its commit grants (planned waits for it): the turn's
    -- token is smaller than theirs, as when a claim granted the turn before its commit.
    turn_grant AS MATERIALIZED (SELECT ${n.nextToken} AS token, gen_random_uuid() AS nonce FROM go),`
          : sql``
      }`;
}

/** A fused step's own fence: the completing attempt still holds its step, judged once the step is locked. */
function stepFence(plan: TurnCommitPlan): SQL {
  const { fused } = plan;
  return fused
    ? sql`EXISTS (SELECT 1 FROM locked l WHERE l.id = ${fused.completion.stepId}::uuid
                    AND l.fencing_token = ${fused.completion.token.toString()}::bigint
                    AND l.nonce = ${fused.completion.nonce}::uuid AND l.status = 'running'
                    AND l.lease_expires_at > (SELECT t FROM step_clock))`
    : sql`true`;
}
