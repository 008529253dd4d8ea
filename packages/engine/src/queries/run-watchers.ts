import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { runColumns, type RunRow } from './read-run.js';
import { msInterval, type SchemaNames } from './schema-names.js';
import { liveRunStatuses } from './status-sql.js';

/*
 * Who waits on a run (issue 26): a `handle.result()` or `handle.watch()` call has a `run_watchers` row for as long
 * as it waits, and the statements that end a run or commit its turn NOTIFY only when the run has one
 * (`<schema>.run_watched`, migration 0018). Rejected: counters on the run row, which a reader had to UPDATE (a
 * write on the hottest row, which the turn commit then waits for) and which nothing could lower safely, so a run
 * watched once NOTIFYed on every later turn; and a NOTIFY from every turn commit, which PostgreSQL serializes behind
 * one lock at COMMIT for every notifying transaction of the cluster. A probe of this table's index (a few live
 * rows) is what an unwatched run's turn pays instead.
 */

/** How long a watcher row lives without its caller pushing it forward (ms): a caller that died costs this at most. */
export const WATCHER_TTL_MS = 10 * 60_000;

/**
 * Insert (or push forward) watcher row `id` on run `runId`, when the run exists and has not ended; `turns` for a
 * `watch()`. Idempotent (retried after a lost reply, it leaves one row). Takes no lock on the run row and writes
 * none. @returns whether the row is there (false: no such run, or it ended — read it).
 */
export async function upsertWatcher(
  db: Database,
  n: SchemaNames,
  p: { id: string; runId: string; turns: boolean },
): Promise<boolean> {
  if (!/^[0-9a-f-]{36}$/i.test(p.runId)) return false;
  const rows = await db.rows<{ id: string }>(sql`
    INSERT INTO ${n.runWatchers} (id, run_id, turns, expires_at)
    SELECT ${p.id}::uuid, r.id, ${p.turns}, ${n.now} + ${msInterval(sql`${WATCHER_TTL_MS}::float8`)}
      FROM ${n.runs} r WHERE r.id = ${p.runId}::uuid AND r.status IN ${liveRunStatuses}
    ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at
    RETURNING id::text`);
  return rows.length > 0;
}

/** Delete watcher row `id` (the call that inserted it returns). Idempotent. */
export async function deleteWatcher(db: Database, n: SchemaNames, id: string): Promise<void> {
  await db.rows(sql`DELETE FROM ${n.runWatchers} WHERE id = ${id}::uuid`);
}

/**
 * Delete the watcher rows whose caller let them lapse (it died, or its process was stopped without ending its
 * waits): by `run_watchers_expires_at_idx`. @returns how many.
 */
export async function deleteLapsedWatchers(db: Database, n: SchemaNames): Promise<number> {
  const rows = await db.rows<{ n: number }>(sql`
    WITH gone AS (DELETE FROM ${n.runWatchers} WHERE expires_at < ${n.now} RETURNING 1)
    SELECT count(*)::int AS n FROM gone`);
  return Number(rows[0]?.n ?? 0);
}

/** How many watcher rows run `runId` has (both kinds). */
export async function countWatchers(db: Database, n: SchemaNames, runId: string): Promise<number> {
  const rows = await db.rows<{ n: number }>(
    sql`SELECT count(*)::int AS n FROM ${n.runWatchers} WHERE run_id = ${runId}::uuid`,
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Run `runId` as committed now, and whether a transaction still in progress has written (or locked) its row: the
 * row's `xmax` is among the transactions the snapshot of this read sees running (`pg_current_snapshot()`, which
 * lists every session's, whatever its role). A waiter reads this after its registration committed; a statement
 * that ended the run (or committed its turn) and decided on its NOTIFY before that is still writing the row, and
 * the waiter, seeing `writing`, reads again once it ended instead of waiting for a NOTIFY that will not come.
 * Plain read: no lock, no write.
 */
export async function readRunForWaiter(
  db: Database,
  n: SchemaNames,
  runId: string,
): Promise<{ run: RunRow; writing: boolean } | undefined> {
  if (!/^[0-9a-f-]{36}$/i.test(runId)) return undefined;
  const rows = await db.rows<RunRow & { writing: boolean }>(sql`
    SELECT ${runColumns(n)},
           r.xmax::text <> '0' AND EXISTS (
             SELECT 1 FROM pg_snapshot_xip(pg_current_snapshot()) x
              WHERE x::text::bigint % 4294967296 = r.xmax::text::bigint) AS writing
      FROM ${n.runs} r WHERE r.id = ${runId}::uuid`);
  const row = rows[0];
  if (!row) return undefined;
  const { writing, ...run } = row;
  return { run, writing };
}
