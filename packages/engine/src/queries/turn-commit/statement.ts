import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from '../schema-names.js';
import { childKeyCtes, childRunCtes } from './children.js';
import { deliveryCtes } from './deliveries.js';
import { gateCtes } from './gate.js';
import { cancelledStepEventCtes, insertedStepCtes, scheduledStepCtes } from './insert-steps.js';
import { newStepInputCtes, plannedStepCtes } from './new-steps.js';
import type { TurnCommitPlan } from './plan.js';
import { resultSelect } from './result.js';
import { leftoverStepCtes, parentAndChildCtes, runEndEventCte } from './run-end.js';
import { runLockCtes } from './run-lock.js';
import { progressEventCte, runRowCtes } from './run-row.js';
import { refusedSignalCtes, takenSignalCtes, unseenSignalCtes } from './signals.js';
import { stepLockCtes } from './step-locks.js';
import { wakeUpCte } from './wake-ups.js';

/**
 * The turn commit's one statement, assembled from its pieces in the lock order of DESIGN.md §4 (invariant 14):
 * 1. the parent's run row (when the run ends: an ancestor before its descendants), then the run's own row — the
 *    fence ({@link runLockCtes});
 * 2. the run's steps the commit changes, by id, then the signals it hands out, by id ({@link stepLockCtes});
 * 3. the gate every write waits for, taking no lock ({@link gateCtes});
 * 4. new rows: the new steps (the parent's own earlier children, when a keyed child reuses one, locked by id after
 *    the parent's rows; flow-control keys `FOR KEY SHARE` in key order), child runs;
 * 5. writes of rows already locked: deliveries, signals, the run row, the run's end (whose cascade to children
 *    locks their run rows last: descendants after their ancestors); then the events and the NOTIFY.
 * Each piece leaves its CTEs out when the plan's switches say the turn has nothing for them. The text is pinned,
 * per combination of switches, by `statement.test.ts`.
 */
export function turnCommitStatement(n: SchemaNames, plan: TurnCommitPlan): SQL {
  const pieces = [
    runLockCtes(n, plan),
    stepLockCtes(n, plan),
    gateCtes(n, plan),
    newStepInputCtes(n, plan),
    childKeyCtes(n, plan),
    plannedStepCtes(n, plan),
    insertedStepCtes(n, plan),
    scheduledStepCtes(n, plan),
    childRunCtes(n, plan),
    cancelledStepEventCtes(n, plan),
    deliveryCtes(n, plan),
    takenSignalCtes(n, plan),
    refusedSignalCtes(n, plan),
    unseenSignalCtes(n, plan),
    runRowCtes(n, plan),
    leftoverStepCtes(n, plan),
    parentAndChildCtes(n, plan),
    runEndEventCte(n, plan),
    progressEventCte(n, plan),
    wakeUpCte(n, plan),
    resultSelect(n, plan),
  ];
  return sql`
    WITH ${sql.join(pieces)}`;
}
