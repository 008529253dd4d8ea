import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { stepKeyHasRoom } from './flow-control.js';
import type { SchemaNames } from './schema-names.js';

/**
 * An expression: ms (DB clock) until the next step on these queues becomes claimable (a retry's backoff, a
 * delayed start, or a lease that will expire), ≤ 0 when one is due now, null when none is pending; a step whose
 * concurrency key is full is not pending (it becomes claimable when a step of its key ends, which wakes or frees
 * a worker that then claims); steps whose ids `exclude` (a subquery) lists are left out; measured from `now`
 * (default: a fresh clock read). No locks. The claim statement selects it too, leaving out what it claimed, from
 * its own clock.
 *
 * Read off `ready` (migration 0024), whose one index is in claim order (queue, priority DESC, due_at, …): the
 * earliest due time of a queue is the least of the earliest of each of its priorities, which it finds by a loose
 * index scan — one descent per (queue, priority) present, then the first row of each that passes the filters —
 * so the cost does not grow with the backlog (20,000 ready rows in 3 priorities: 40 buffers).
 */
export function nextDueMsSql(
  n: SchemaNames,
  p: { queues: readonly string[]; activityNames: readonly string[] },
  exclude?: SQL,
  now: SQL = n.now,
): SQL {
  return sql`(SELECT (extract(epoch FROM (min(g.due_at) - ${now})) * 1000)::float8
      FROM unnest(ARRAY[${sql.join(
        p.queues.map((q) => sql`${q}`),
        sql`, `,
      )}]::text[]) q(queue)
      CROSS JOIN LATERAL (
        WITH RECURSIVE pr(priority) AS (
          (SELECT r.priority FROM ${n.ready} r WHERE r.queue = q.queue ORDER BY r.priority DESC LIMIT 1)
          UNION ALL
          SELECT (SELECT r.priority FROM ${n.ready} r WHERE r.queue = q.queue AND r.priority < pr.priority
                   ORDER BY r.priority DESC LIMIT 1)
            FROM pr WHERE pr.priority IS NOT NULL)
        SELECT (SELECT r.due_at FROM ${n.ready} r LEFT JOIN ${n.steps} x ON x.id = r.step_id
                 WHERE r.queue = q.queue AND r.priority = pr.priority AND r.name IN ${p.activityNames}
                   AND (x.id IS NULL OR ${stepKeyHasRoom(n, sql`x`)})${exclude ? sql` AND r.step_id NOT IN ${exclude}` : sql``}
                 ORDER BY r.due_at LIMIT 1) AS due_at
          FROM pr WHERE pr.priority IS NOT NULL) g)`;
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
