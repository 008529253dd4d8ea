/**
 * The consistency of `ready` (migration 0024), the claimable set of activity steps, with the `steps` rows it is
 * derived from — written out here independently of the engine's `<schema>.ready_due`, so a fault in that function
 * is caught too. A step is claimable now or later when it is an activity, `scheduled` or `running`, with a due time
 * (`next_run_at`); its one `ready` row is due at `next_run_at`, or, for a running step that is to be ended at its
 * lease's end rather than reclaimed (a cancel requested, or no attempts left: `expiring`), at the earlier of that
 * and its lease's end.
 */
import { sql } from 'drizzle-orm';
import type { Engine } from '@palisade/engine';

export interface ReadyMismatch {
  /** `missing`: a claimable step without exactly one matching row; `stray`: a row no claimable step matches. */
  problem: 'missing' | 'stray';
  step_id: string;
  status: string | null;
  /** Matching rows of a `missing` step (0 or ≥ 2); null for a stray row. */
  rows: number | null;
}

/** Every disagreement between `ready` and `steps`, read in one snapshot; `[]` when they agree. */
export async function readyMismatches(engine: Engine): Promise<ReadyMismatch[]> {
  const n = engine.names;
  const expiring = sql`(s.status = 'running' AND (s.cancel_requested_at IS NOT NULL
      OR s.attempt >= coalesce(s.max_attempts, 2147483647)))`;
  const due = sql`(CASE WHEN ${expiring} THEN least(s.next_run_at, s.lease_expires_at) ELSE s.next_run_at END)`;
  const claimable = sql`(s.kind = 'activity' AND s.status IN ('scheduled', 'running') AND s.next_run_at IS NOT NULL)`;
  const matches = sql`(r.step_id = s.id AND r.run_id = s.run_id AND r.queue = s.queue AND r.priority = s.priority
      AND r.name = s.name AND r.due_at = ${due} AND r.expiring = ${expiring})`;
  return engine.database.rows<ReadyMismatch>(sql`
    SELECT 'missing' AS problem, s.id::text AS step_id, s.status, m.rows
      FROM ${n.steps} s
      CROSS JOIN LATERAL (SELECT count(*)::int AS rows FROM ${n.ready} r WHERE ${matches}) m
     WHERE ${claimable} AND m.rows <> 1
    UNION ALL
    SELECT 'stray', r.step_id::text, s.status, NULL
      FROM ${n.ready} r LEFT JOIN ${n.steps} s ON s.id = r.step_id
     WHERE s.id IS NULL OR NOT (${claimable} AND ${matches})
     ORDER BY 1, 2`);
}
