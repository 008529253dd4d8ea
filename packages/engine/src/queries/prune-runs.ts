import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { msInterval, type SchemaNames } from './schema-names.js';
import { terminalRunStatuses } from './status-sql.js';

/** How many rows one retention statement deleted (or, for a dry run, would delete). */
export interface PrunedCounts {
  readonly runs: number;
  readonly steps: number;
  readonly attempts: number;
  readonly events: number;
}

interface CountRow {
  runs: number;
  steps: number;
  attempts: number;
  events: number;
}

function counts(row: CountRow | undefined): PrunedCounts {
  return {
    runs: Number(row?.runs ?? 0),
    steps: Number(row?.steps ?? 0),
    attempts: Number(row?.attempts ?? 0),
    events: Number(row?.events ?? 0),
  };
}

/**
 * The CTE `clock` (`t`, `cutoff`): the database time (`<schema>.now()`, which honours time travel) and the
 * moment before which a run must have finished to be pruned. Read once, so that every comparison of the
 * statement uses one instant, and as a CTE so the cutoff is a constant bound of the `runs_created_at_idx` scan
 * (`now()` is VOLATILE and could not bound an index scan itself).
 */
function clockCte(n: SchemaNames, olderThanMs: number): SQL {
  return sql`clock AS MATERIALIZED (
    SELECT ${n.now} AS t, ${n.now} - ${msInterval(sql`${olderThanMs}::float8`)} AS cutoff)`;
}

/**
 * A run that retention may delete, on alias `r`: it ended (`completed`, `failed` or `cancelled`) before the
 * cutoff, and no attempt can still hold anything of it — neither its turn nor any step has a lease that has not
 * run out. A run ends under a live attempt when it is cancelled or finishes while an activity still runs; that
 * holder's next write must find the step and be refused with its reason (invariant 12), not find no row at all.
 * Leases are seconds to an hour and retention is days, so in practice this only matters for a tiny `olderThan`.
 */
function prunablePredicate(n: SchemaNames): SQL {
  return sql`r.created_at < (SELECT cutoff FROM clock)
     AND r.status IN ${terminalRunStatuses}
     AND r.finished_at < (SELECT cutoff FROM clock)
     AND (r.turn_lease_expires_at IS NULL OR r.turn_lease_expires_at <= (SELECT t FROM clock))
     AND NOT EXISTS (SELECT 1 FROM ${n.steps} s
                      WHERE s.run_id = r.id AND s.lease_expires_at > (SELECT t FROM clock))`;
}

/**
 * Delete one batch of at most `limit` runs that ended more than `olderThanMs` ago (by the database clock),
 * together with their steps, attempts, events and signals, in one statement; the oldest first, read off
 * `runs_created_at_idx` (a run that ended before the cutoff began before it), so the cost of a batch does not grow
 * with the history kept — only with the runs begun before the cutoff that are still live or ended since, which
 * it reads past. Not an index of finished runs: `finished_at` and `status` change on every job's hot path, and an
 * indexed column there would make those updates write every index of the runs (migration 0008). Deleting a run frees its
 * idempotency key: a later start with that key creates a new run.
 *
 * A run is never deleted while it has not ended: the status test is re-checked on the locked row version (READ
 * COMMITTED re-evaluates the predicate after the lock), so a run a retry has just made `pending` again is left
 * alone. A run that other runs name as their parent (`parent_run_id`) is kept until those children are gone, so
 * no run is ever left pointing at a deleted parent; the children go first, by the same rule, and the parent in a
 * later batch.
 *
 * Locks (invariant 14): the runs first, `FOR UPDATE SKIP LOCKED` (the strength a DELETE needs, taken up front so
 * it is never upgraded while another statement holds a key-share lock): runs that a cancel, a retry or another
 * pruner holds are skipped, never waited for, so several workers sweeping at once share the work instead of
 * queueing. Then the batch's steps by id, `FOR UPDATE`; the aggregates make every lock be taken before any
 * DELETE runs. Then the children are deleted explicitly, set-based over one uuid array (steps and attempts have
 * no foreign key to cascade, migration 0011; the events' key would cascade, but row by row): events, attempts,
 * steps, runs.
 * @returns how many rows of each table were deleted; `runs` < `limit` means this batch reached the end.
 */
export async function pruneRunBatch(
  db: Database,
  n: SchemaNames,
  p: { olderThanMs: number; limit: number },
): Promise<PrunedCounts> {
  const rows = await db.rows<CountRow>(sql`
    WITH ${clockCte(n, p.olderThanMs)},
    doomed AS MATERIALIZED (
      SELECT r.id FROM ${n.runs} r
       WHERE ${prunablePredicate(n)}
         AND NOT EXISTS (SELECT 1 FROM ${n.runs} c WHERE c.parent_run_id = r.id)
       ORDER BY r.created_at
       LIMIT ${p.limit}
       FOR UPDATE OF r SKIP LOCKED),
    batch AS MATERIALIZED (SELECT coalesce(array_agg(id), '{}'::uuid[]) AS ids FROM doomed),
    step_locks AS MATERIALIZED (
      SELECT count(*) AS n FROM (
        SELECT s.id FROM ${n.steps} s WHERE s.run_id = ANY((SELECT ids FROM batch)::uuid[]) ORDER BY s.id FOR UPDATE OF s) x),
    gone_events AS (
      DELETE FROM ${n.events} e
       WHERE e.run_id = ANY((SELECT ids FROM batch)::uuid[]) AND (SELECT n FROM step_locks) >= 0
      RETURNING 1),
    gone_attempts AS (
      DELETE FROM ${n.attemptRecords} a
       WHERE a.run_id = ANY((SELECT ids FROM batch)::uuid[]) AND (SELECT n FROM step_locks) >= 0
      RETURNING 1),
    -- A run's signals go with it (not counted: the counts are the history a run show lists).
    gone_signals AS (
      DELETE FROM ${n.signals} g
       WHERE g.run_id = ANY((SELECT ids FROM batch)::uuid[]) AND (SELECT n FROM step_locks) >= 0
      RETURNING 1),
    -- Each step's current grant that no attempts row records (migration 0029) is an attempt deleted with it.
    gone_steps AS (
      DELETE FROM ${n.steps} s
       WHERE s.run_id = ANY((SELECT ids FROM batch)::uuid[]) AND (SELECT n FROM step_locks) >= 0
      RETURNING s.claimed_at IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM ${n.attemptRecords} x WHERE x.fencing_token = s.fencing_token) AS grant_gone),
    gone_runs AS (
      DELETE FROM ${n.runs} r
       WHERE r.id = ANY((SELECT ids FROM batch)::uuid[]) AND (SELECT n FROM step_locks) >= 0
      RETURNING 1)
    SELECT (SELECT count(*) FROM gone_runs)::int AS runs, (SELECT count(*) FROM gone_steps)::int AS steps,
           ((SELECT count(*) FROM gone_attempts) + (SELECT count(*) FROM gone_steps WHERE grant_gone))::int AS attempts, (SELECT count(*) FROM gone_events)::int AS events,
           (SELECT count(*) FROM gone_signals)::int AS signals`);
  return counts(rows[0]);
}

/**
 * Count what pruning runs that ended more than `olderThanMs` ago would delete, deleting nothing (a dry run):
 * the runs {@link pruneRunBatch} would take batch after batch, and their steps, attempts and events. A run
 * counts when it may be pruned and no run below it (its children, their children, …) has to be kept, since
 * those children would keep it. Takes no locks; reads every prunable run, so it is for an operator, not for a
 * maintenance tick.
 */
export async function countPrunableRuns(
  db: Database,
  n: SchemaNames,
  p: { olderThanMs: number },
): Promise<PrunedCounts> {
  const rows = await db.rows<CountRow>(sql`
    WITH RECURSIVE ${clockCte(n, p.olderThanMs)},
    eligible AS MATERIALIZED (SELECT r.id FROM ${n.runs} r WHERE ${prunablePredicate(n)}),
    -- Runs that must be kept although they have a parent, and every run above them: those parents stay too.
    kept_below(id, parent_run_id) AS (
      SELECT c.id, c.parent_run_id FROM ${n.runs} c
       WHERE c.parent_run_id IS NOT NULL AND c.id NOT IN (SELECT id FROM eligible)
      UNION
      SELECT p.id, p.parent_run_id FROM ${n.runs} p JOIN kept_below k ON p.id = k.parent_run_id),
    prunable AS MATERIALIZED (
      SELECT id FROM eligible
       WHERE id NOT IN (SELECT parent_run_id FROM kept_below WHERE parent_run_id IS NOT NULL))
    SELECT (SELECT count(*) FROM prunable)::int AS runs,
           (SELECT count(*) FROM ${n.steps} WHERE run_id IN (SELECT id FROM prunable))::int AS steps,
           (SELECT count(*) FROM ${n.attempts} WHERE run_id IN (SELECT id FROM prunable))::int AS attempts,
           (SELECT count(*) FROM ${n.events} WHERE run_id IN (SELECT id FROM prunable))::int AS events`);
  return counts(rows[0]);
}
