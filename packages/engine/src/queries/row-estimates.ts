import { sql, type SQL } from 'drizzle-orm';

/**
 * Row counts the planner cannot know, written into a statement's text as constants, so that the plan it keeps for
 * the text (a prepared statement's generic plan) is costed for about the rows it will meet.
 * @module
 */

/** The power of two at or above `n` (≥ 1): a size class, so a statement has a few texts, not one per size. */
function sizeClass(n: number): number {
  return 2 ** Math.ceil(Math.log2(Math.max(1, n)));
}

/**
 * A claim scan's LIMIT as a constant of the statement: {@link sizeClass} of `limit`. A LIMIT parameter is costed
 * as 10 % of the due rows in a generic plan: with statistics and a deep queue the claim's generic plan was a hash
 * join and sort of the whole queue and the rows it names, and the server planned every claim anew instead
 * (STORAGE.md, "what statistics cost the claim"). The scan's rows past `limit` are locked only for the statement.
 */
export function scanLimit(limit: number): SQL {
  return sql.raw(String(sizeClass(limit)));
}

/**
 * `LIMIT <size class of count>` for a set-returning call over a JSON array parameter of `count` elements
 * (`jsonb_array_elements`, `jsonb_to_recordset`), which keeps every element. The planner costs such a call as 100
 * rows whatever the array holds, so a statement fed one row (a workflow's completion, a turn's one new step) was
 * planned as a batch of 100: hash joins over sequential scans of `runs` and `steps` where one primary-key probe
 * each was due — 0.5 ms of a completion's 2 ms on a table of a few thousand rows, growing with it until the
 * table's first ANALYZE. With the size class as a LIMIT the estimate is at most that.
 */
export function jsonRowsLimit(count: number): SQL {
  return sql` LIMIT ${scanLimit(count)}`;
}
