import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import { runKeyHasRoom, stepKeyHasRoom } from './flow-control.js';
import { msInterval, type SchemaNames } from './schema-names.js';

/** Work of a run that has been due for a while and that no worker ever claimed. */
export interface UnclaimedWork {
  /** `activity`: a step no worker claimed; `workflow`: the run's first turn, which no worker claimed. */
  readonly kind: 'activity' | 'workflow';
  /** The activity or workflow name a worker must serve. */
  readonly name: string;
  readonly queue: string;
  readonly stepId: string | null;
  /** How long it has been due, by the database clock (ms). */
  readonly dueForMs: number;
}

/**
 * A run's work that has been due for at least `olderThanMs` and never claimed (epoch 0): most likely no live worker
 * serves that activity or workflow on that queue. Work waiting for a place under its concurrency key, full in this
 * read, is not listed (nor is work over its rate limit, which is not due yet). Plain read, no locks.
 */
export async function readUnclaimedWork(
  db: Database,
  n: SchemaNames,
  runId: string,
  olderThanMs: number,
): Promise<UnclaimedWork[]> {
  const rows = await db.rows<{
    kind: 'activity' | 'workflow';
    name: string;
    queue: string;
    step_id: string | null;
    due_for_ms: number;
  }>(sql`
    SELECT 'activity' AS kind, s.name, s.queue, s.id::text AS step_id,
           (extract(epoch FROM (${n.now} - s.next_run_at)) * 1000)::float8 AS due_for_ms
      FROM ${n.steps} s
     WHERE s.run_id = ${runId}::uuid AND s.kind = 'activity' AND s.status = 'scheduled' AND s.epoch = 0
       AND s.retired_at IS NULL AND s.next_run_at <= ${n.now} - ${msInterval(sql`${olderThanMs}::int`)}
       -- Not a step waiting for a place under its full concurrency key: that wait is not a missing worker.
       AND ${stepKeyHasRoom(n, sql`s`)}
    UNION ALL
    SELECT 'workflow', r.name, r.queue, NULL,
           (extract(epoch FROM (${n.now} - r.turn_next_run_at)) * 1000)::float8
      FROM ${n.runs} r
     WHERE r.id = ${runId}::uuid AND r.kind = 'workflow' AND r.status = 'pending' AND r.turn_epoch = 0
       AND r.turn_next_run_at <= ${n.now} - ${msInterval(sql`${olderThanMs}::int`)} AND ${runKeyHasRoom(n, sql`r`)}`);
  return rows.map((r) => ({
    kind: r.kind,
    name: r.name,
    queue: r.queue,
    stepId: r.step_id,
    dueForMs: Math.round(r.due_for_ms),
  }));
}

/** Due work on a worker's queues that names an activity or workflow the worker does not register. */
export interface UnservedWork {
  readonly kind: 'activity' | 'workflow';
  readonly name: string;
  readonly queue: string;
}

/**
 * The (kind, name, queue) of work due now on `queues` whose activity or workflow is not among the names given (a
 * worker's registrations): scheduled activity steps (standalone runs' too) and workflow runs with a turn due. At
 * most `limit` of each kind, read off `ready` (whose key holds the name) and `turn_queue_claim_order_idx`; each scan
 * stops at its LIMIT of unserved rows, so a worker whose own backlog is large reads it (once per check), not more.
 * Plain read, no locks.
 */
export async function readUnservedWork(
  db: Database,
  n: SchemaNames,
  p: {
    queues: readonly string[];
    activityNames: readonly string[];
    workflowNames: readonly string[];
    limit: number;
  },
): Promise<UnservedWork[]> {
  if (p.queues.length === 0) return [];
  const notIn = (column: SQL, names: readonly string[]) =>
    names.length === 0 ? sql`true` : sql`${column} NOT IN ${names}`;
  return db.rows<UnservedWork>(sql`
    SELECT DISTINCT kind, name, queue FROM (
      (SELECT 'activity' AS kind, s.name, s.queue FROM ${n.ready} r
         -- ready drives, each row's step read by primary key: OFFSET 0 keeps the planner from flattening the
         -- lateral read into a join it may turn around (over a schema never analyzed it did, scanning every
         -- ready row per live step: 7 s for 10,000 jobs, on a core the claims needed).
         CROSS JOIN LATERAL (SELECT x.name, x.queue FROM ${n.steps} x
                              WHERE x.id = r.step_id AND x.status = 'scheduled' AND x.retired_at IS NULL OFFSET 0) s
        WHERE r.queue IN ${p.queues} AND r.due_at <= ${n.now} AND ${notIn(sql`r.name`, p.activityNames)}
        LIMIT ${p.limit})
      UNION ALL
      (SELECT 'workflow', q.name, q.queue FROM ${n.turnQueue} q
        WHERE q.queue IN ${p.queues} AND q.due_at <= ${n.now} AND ${notIn(sql`q.name`, p.workflowNames)}
        LIMIT ${p.limit})) x
     ORDER BY kind, name, queue`);
}
