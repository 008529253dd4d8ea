import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { stepKeyHasRoom } from './flow-control.js';
import type { SchemaNames } from './schema-names.js';
import { liveStepStatuses } from './status-sql.js';

/**
 * An expression: ms (DB clock) until the next step on these queues becomes claimable (a retry's backoff, a
 * delayed start, or a lease that will expire), ≤ 0 when one is due now, null when none is pending; a step whose
 * concurrency key is full is not pending (it becomes claimable when a step of its key ends, which wakes or frees
 * a worker that then claims); steps whose
 * ids `exclude` (a subquery) lists are left out; measured from `now` (default: a fresh clock read). Uses
 * `steps_claimable_idx`; no locks. The claim statement selects it too, leaving out what it claimed, from its own
 * clock.
 */
export function nextDueMsSql(
  n: SchemaNames,
  p: { queues: readonly string[]; activityNames: readonly string[] },
  exclude?: SQL,
  now: SQL = n.now,
): SQL {
  return sql`(SELECT (extract(epoch FROM (min(x.next_run_at) - ${now})) * 1000)::float8
      FROM ${n.steps} x
     WHERE x.queue IN ${p.queues} AND x.status IN ${liveStepStatuses} AND x.name IN ${p.activityNames}
       AND x.kind = 'activity' AND x.next_run_at IS NOT NULL AND ${stepKeyHasRoom(n, sql`x`)}${exclude ? sql` AND x.id NOT IN ${exclude}` : sql``})`;
}

/**
 * How long until the next step on these queues becomes claimable, by the DB clock, so an idle worker sleeps
 * until then instead of polling tightly ({@link nextDueMsSql}). @returns ms to wait (≤ 0: due now), or null
 * when nothing is pending.
 */
export async function msUntilNextDueStep(
  db: Database,
  n: SchemaNames,
  p: { queues: readonly string[]; activityNames: readonly string[] },
): Promise<number | null> {
  if (p.queues.length === 0 || p.activityNames.length === 0) return null;
  const rows = await db.rows<{ wait_ms: number | null }>(sql`SELECT ${nextDueMsSql(n, p)} AS wait_ms`);
  return rows[0]?.wait_ms ?? null;
}
