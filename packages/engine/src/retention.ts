import type { Database } from './db/database.js';
import { pruneRunBatch, type PrunedCounts } from './queries/prune-runs.js';
import { deleteIdleFlowKeys, lockIdleFlowKeys } from './queries/flow-control.js';
import { deleteLapsedWatchers } from './queries/run-watchers.js';
import type { SchemaNames } from './queries/schema-names.js';

export type { PrunedCounts } from './queries/prune-runs.js';

/** Runs deleted per statement: small enough that one batch holds its locks briefly, large enough to keep up. */
export const PRUNE_BATCH_SIZE = 500;

/** What `engine.pruneRuns` did (or, with `dryRun`, would do). */
export interface PruneResult extends PrunedCounts {
  /** The age (ms) past which finished runs were deleted. */
  readonly olderThanMs: number;
  /** True when nothing was deleted and the counts say what would have been. */
  readonly dryRun: boolean;
}

/**
 * Delete the finished runs older than `olderThanMs` (with their steps, attempts and events), batch after batch
 * of `batchSize` runs, one statement each (see {@link pruneRunBatch}).
 *
 * `untilEmpty: true` goes on until a batch deletes nothing, so that parents kept back by their children in one
 * batch go in a later one (what an operator's `palisade runs prune` expects); a maintenance sweep passes false
 * and stops at the first short batch, leaving the rest to its next sweep. `keepGoing` is asked before each
 * batch after the first (a stopping worker ends its sweep between batches).
 *
 * Then it deletes what no live work needs any more: the flow-control keys no live run or step holds
 * ({@link sweepIdleFlowKeys}) and the watcher rows whose caller let them lapse.
 */
export async function pruneFinishedRuns(
  db: Database,
  n: SchemaNames,
  p: {
    olderThanMs: number;
    untilEmpty: boolean;
    batchSize?: number;
    keepGoing?: () => boolean;
  },
): Promise<PrunedCounts> {
  const limit = p.batchSize ?? PRUNE_BATCH_SIZE;
  const total = { runs: 0, steps: 0, attempts: 0, events: 0 };
  for (;;) {
    const batch = await pruneRunBatch(db, n, { olderThanMs: p.olderThanMs, limit });
    total.runs += batch.runs;
    total.steps += batch.steps;
    total.attempts += batch.attempts;
    total.events += batch.events;
    const more = p.untilEmpty ? batch.runs > 0 : batch.runs >= limit;
    if (!more || (p.keepGoing !== undefined && !p.keepGoing())) break;
  }
  await sweepIdleFlowKeys(db, n, { limit, keepGoing: p.keepGoing });
  await deleteLapsedWatchers(db, n);
  return total;
}

/**
 * Delete the flow-control keys (`flow_keys` rows) that no live run or step holds, `limit` per transaction of two
 * statements (lock, then delete what is still idle: see lockIdleFlowKeys), until a transaction locks fewer.
 * A key is inserted again by the next work that needs it. @returns how many keys were deleted.
 */
export async function sweepIdleFlowKeys(
  db: Database,
  n: SchemaNames,
  p: { limit: number; keepGoing?: (() => boolean) | undefined },
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const { locked, gone } = await db.transaction(async (tx) => {
      const keys = await lockIdleFlowKeys(tx, n, p.limit);
      return { locked: keys.length, gone: await deleteIdleFlowKeys(tx, n, keys) };
    });
    deleted += gone;
    if (locked < p.limit || (p.keepGoing !== undefined && !p.keepGoing())) return deleted;
  }
}
