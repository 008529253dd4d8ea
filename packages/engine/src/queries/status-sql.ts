import { sql } from 'drizzle-orm';
import {
  LIVE_RUN_STATUSES,
  LIVE_STEP_STATUSES,
  TERMINAL_RUN_STATUSES,
  TERMINAL_STEP_STATUSES,
  UNSUCCESSFUL_STATUSES,
  sqlList,
} from '../turn/state-machine.js';

// The status sets of turn/state-machine.ts as SQL lists for `status IN ${…}`. Spliced in as text (sql.raw), never
// as parameters: a partial index whose predicate is `status IN ('scheduled', 'running')` is used only when the
// planner sees the same constants in the query, which a parameter of a generic plan would hide.

/** `('pending', 'running')`: a run that has not ended. */
export const liveRunStatuses = sql.raw(sqlList(LIVE_RUN_STATUSES));
/** `('completed', 'failed', 'cancelled')`: a run that has ended. */
export const terminalRunStatuses = sql.raw(sqlList(TERMINAL_RUN_STATUSES));
/** `('scheduled', 'running')`: a step that has not ended. */
export const liveStepStatuses = sql.raw(sqlList(LIVE_STEP_STATUSES));
/** `('completed', 'failed', 'cancelled')`: a step that has ended. */
export const terminalStepStatuses = sql.raw(sqlList(TERMINAL_STEP_STATUSES));
/** `('failed', 'cancelled')`: a run or step that ended unsuccessfully, the ends a retry undoes. */
export const unsuccessfulStatuses = sql.raw(sqlList(UNSUCCESSFUL_STATUSES));
