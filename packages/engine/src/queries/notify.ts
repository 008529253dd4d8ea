/**
 * The statements' side of the engine's wake-up NOTIFY: the payload's items and their format are described with
 * their decoder, `notificationItems` in `db/notification-payload.ts`.
 * @module
 */
import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from './schema-names.js';

/** Largest payload sent as it is (PostgreSQL refuses more than 8000 bytes); longer ones name the runs as `run:*`. */
const MAX_PAYLOAD = 7900;

/**
 * A CTE named `name` that sends one NOTIFY carrying every item `items` (a query over one text column `item`)
 * yields, de-duplicated, or none when it yields none. When the items do not fit one payload, the `run:` items
 * are folded into `run:*` (every waiter re-reads its run) and the other items, a queue each, are kept.
 */
export function notifyOnce(n: SchemaNames, name: string, items: SQL): SQL {
  return sql`${sql.raw(name)} AS (
    SELECT pg_notify(${n.channel},
             CASE WHEN length(p.all_items) <= ${MAX_PAYLOAD} THEN p.all_items
                  ELSE concat_ws(E'\\n', 'run:*', p.other_items) END)
      FROM (SELECT string_agg(item, E'\\n') AS all_items,
                   string_agg(item, E'\\n') FILTER (WHERE item NOT LIKE 'run:%') AS other_items
              FROM (SELECT DISTINCT item FROM (${items}) x(item) WHERE item IS NOT NULL) d) p
     WHERE p.all_items IS NOT NULL)`;
}

/**
 * The `run:<id>` items of the runs that `endedRuns` (a CTE returning the `id` of the run rows a statement ended,
 * after it wrote them) ended: only those a `handle.result()` or `handle.watch()` waits on now (a `run_watchers`
 * row, read by `<schema>.run_watched` with a snapshot of its own: see migration 0018 and run-watchers.ts).
 */
export function endedRunItems(n: SchemaNames, endedRuns: SQL): SQL {
  return sql`SELECT 'run:' || id::text FROM ${endedRuns} WHERE ${n.runWatched}(id, false)`;
}
