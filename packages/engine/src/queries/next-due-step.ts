import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * How long until the next step on these queues becomes claimable (a retry's backoff, a delayed start, or a
 * lease that will expire), by the DB clock, so an idle worker sleeps until then instead of polling tightly.
 * Uses `steps_claimable_idx`; no locks. @returns ms to wait (≤ 0: due now), or null when nothing is pending.
 */
export async function msUntilNextDueStep(
  db: Database,
  n: SchemaNames,
  p: { queues: readonly string[]; activityNames: readonly string[] },
): Promise<number | null> {
  if (p.queues.length === 0 || p.activityNames.length === 0) return null;
  const rows = await db.rows<{ wait_ms: number | null }>(sql`
    SELECT (extract(epoch FROM (min(next_run_at) - ${n.now})) * 1000)::float8 AS wait_ms
      FROM ${n.steps}
     WHERE queue IN ${p.queues} AND status IN ('scheduled', 'running') AND name IN ${p.activityNames}
       AND kind = 'activity' AND next_run_at IS NOT NULL`);
  return rows[0]?.wait_ms ?? null;
}
