import { sql, type SQL } from 'drizzle-orm';
import { jsonRowsLimit } from '../row-estimates.js';
import type { SchemaNames } from '../schema-names.js';
import type { TurnCommitPlan } from './plan.js';
import { liveStepStatuses } from '../status-sql.js';

/**
 * The rows of the run the commit changes, locked after the run row (`dl`, `locked`, `taken`, `step_clock`,
 * `clock`).
 *
 * Locks: the steps the commit changes, by id (`FOR NO KEY UPDATE`, `ORDER BY s.id`): the outcomes it delivers (a
 * fused step's completed step among them) and, when the run ends, every live step — invariant 14's one order, the
 * run first, then its steps by id. A locking read returns each row's newest version even when the statement's
 * snapshot is older, so what the commit decides from them is current. Then, with a signal handed out, the signals
 * it takes, by id (`FOR UPDATE`), after the steps. The commit's clocks are read once these locks are held.
 */
export function stepLockCtes(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const { fused, runId, ending, deliveries, takenSignalsArray, signalsTaken, byPosition } = plan;
  return sql`
    -- The outcomes delivered, each by step id; a wait recorded by a turn of a kept instance (which does not know
    -- its id) by its position, as the live step there.
    dl AS MATERIALIZED (
      SELECT ${
        byPosition
          ? sql`coalesce(x.id, (SELECT s.id FROM ${n.steps} s
                              WHERE s.run_id = ${runId}::uuid AND s.seq = x.seq AND s.retired_at IS NULL))`
          : sql`x.id`
      } AS id, x.delivered_seq, x.fires_timer, x.signal_id
        FROM jsonb_to_recordset(${JSON.stringify(deliveries)}::jsonb)
             AS x(id uuid, seq int, delivered_seq int, fires_timer boolean, signal_id bigint)${jsonRowsLimit(deliveries.length)}),
    -- Then the steps this commit changes, by id, each as its newest version (a claim that committed while the
    -- statement waited is seen as running; one that comes later skips the locked row).
    locked AS MATERIALIZED (
      SELECT s.id, s.status, s.fencing_token, s.nonce, s.lease_expires_at FROM ${n.steps} s
       WHERE s.run_id = ${runId}::uuid AND EXISTS (SELECT 1 FROM fence)
         AND (${
           byPosition
             ? sql`s.id IN (SELECT id FROM dl)`
             : sql`s.id = ANY(${`{${deliveries.map((d) => d.id).join(',')}}`}::uuid[])`
         }
              OR (${ending} AND s.status IN ${liveStepStatuses} AND s.retired_at IS NULL))
       ORDER BY s.id FOR NO KEY UPDATE OF s),
    -- The signals the turn hands to waits, locked after the steps (newest versions): still pending, or the commit
    -- conflicts (a retry, or a turn whose snapshot was older than a commit that took them, ran again).
${
  signalsTaken
    ? sql`
    taken AS MATERIALIZED (
      SELECT g.id, g.consumed_at, g.payload FROM ${n.signals} g
       WHERE g.id = ANY(${takenSignalsArray}::bigint[]) AND g.run_id = ${runId}::uuid
         AND EXISTS (SELECT 1 FROM fence) AND (SELECT count(*) FROM locked) >= 0
       ORDER BY g.id FOR UPDATE OF g),`
    : sql``
}
    -- The clock read once the commit's locks are held: a fused step's completion is judged and written at it; every
    -- other write of the commit reads clock, which is the same but for a fused step, whose turn comes after its
    -- completion (a microsecond later at least, so that a run's events order the completion first).
    step_clock AS MATERIALIZED (SELECT ${n.now} AS t FROM (SELECT count(*) FROM locked) x),
    clock AS MATERIALIZED (
      SELECT ${fused ? sql`greatest(${n.now}, t + interval '1 microsecond')` : sql`t`} AS t FROM step_clock),`;
}
