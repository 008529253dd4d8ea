import { sql } from 'drizzle-orm';
import { quoteIdent, type Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * ANALYZE the engine's tables whose planner statistics are stale where autovacuum will not refresh them
 * (STORAGE.md, "The held horizon, read again" and what follows it); resolves with the names of the tables analyzed
 * (empty when none was due). postgres.js prepares every statement, and after five executions the server may keep a
 * generic plan for it, costed with the statistics of that moment: a plan made while `runs` and `steps` were empty
 * joins them by sequential scans, and it stays in every pooled session until the statistics of a table it reads
 * change. With autovacuum on, its auto-analyze does that; with autovacuum off (the server's `autovacuum`, or a
 * table's `autovacuum_enabled`), nothing did, and completions that scanned 10⁵ rows each collapsed throughput.
 *
 * A table is due when more rows changed since its last analyze (`pg_stat_user_tables.n_mod_since_analyze`) than
 * `autovacuum_analyze_threshold` (50 by default) plus its row estimate: an empty table after 50 changes, then each
 * time it has about doubled or turned over. Not autovacuum's 10 % (`autovacuum_analyze_scale_factor`): the engine's
 * statements are key lookups whose plans go wrong only when the estimate is off by orders of magnitude, while every
 * analyze makes every session re-plan every statement on the table, which a busy worker felt as a stall. Only
 * tables the engine's role may analyze (it owns them); `ANALYZE (SKIP_LOCKED)` passes over a table another session
 * is analyzing. One round trip when nothing is due, two otherwise. PostgreSQL only (PGlite plans each statement
 * with its parameters).
 */
export async function analyzeStaleTables(db: Database, n: SchemaNames): Promise<string[]> {
  const due = await db.rows<{ table: string }>(sql`
    SELECT s.relname AS "table"
      FROM pg_stat_user_tables s
      JOIN pg_class c ON c.oid = s.relid
     WHERE s.schemaname = ${n.schema}
       AND pg_has_role(c.relowner, 'USAGE')
       AND (current_setting('autovacuum')::boolean = false
            OR EXISTS (SELECT 1 FROM unnest(c.reloptions) AS o(opt)
                        -- CASE: the cast only for this option (another's value, fillfactor=70, is no boolean).
                        WHERE CASE WHEN split_part(o.opt, '=', 1) = 'autovacuum_enabled'
                                   THEN NOT split_part(o.opt, '=', 2)::boolean END))
       AND s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8 + greatest(c.reltuples, 0)
     ORDER BY s.relname`);
  if (due.length === 0) return [];
  const tables = due.map((r) => r.table);
  const list = tables.map((t) => `${quoteIdent(n.schema)}.${quoteIdent(t)}`).join(', ');
  await db.rows(sql.raw(`ANALYZE (SKIP_LOCKED) ${list}`));
  return tables;
}
