/**
 * The run, step and attempt state machines (DESIGN.md §4), in one place: the statuses as `as const` objects with
 * their union types, the sets the statements test (live, terminal), and the kinds of row each machine covers; the
 * transition tables are beside it in `transitions.ts`. TypeScript types, the SQL texts (through {@link sqlList})
 * and the CHECK constraints of `schema/` all derive from here; the diagrams in `STATE-MACHINE.md` are checked
 * against the tables by `state-machine.test.ts`.
 *
 * Pure: no imports, no database. A status is stored as `text` in the `status` column of `runs` and `steps`, and
 * as the `outcome` of an `attempts` row (NULL while the attempt is open).
 */

/** The `status` of a run (`runs.status`). */
export const RunStatus = {
  /** Inserted, no turn has claimed it yet (a standalone activity run stays pending until its step ends). */
  pending: 'pending',
  /** A workflow run whose first turn was claimed; it stays running between turns. */
  running: 'running',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
} as const;
/** The `status` of a run. */
export type RunStatus = (typeof RunStatus)[keyof typeof RunStatus];

/** The `status` of a step (`steps.status`). */
export const StepStatus = {
  /** Waiting: an activity for its claim, a timer or signal wait for its due time or signal. */
  scheduled: 'scheduled',
  /** An activity claimed by a worker (under a lease), or a child step whose child run has not ended. */
  running: 'running',
  completed: 'completed',
  failed: 'failed',
  cancelled: 'cancelled',
} as const;
/** The `status` of a step. */
export type StepStatus = (typeof StepStatus)[keyof typeof StepStatus];

/** How an attempt ended (`attempts.outcome`; NULL while the attempt is open). */
export const AttemptOutcome = {
  completed: 'completed',
  failed: 'failed',
  /** Its lease expired and a later claim (or the expiry sweep) took the step over. */
  leaseExpired: 'lease_expired',
  /** An owner write of it was refused: a newer attempt, a cancel or the run's end had superseded it. */
  rejectedStale: 'rejected_stale',
  cancelled: 'cancelled',
  /** Its start-to-close timeout passed. */
  timedOut: 'timed_out',
  /** Handed back unstarted or on shutdown (a fenced release, not charged to the retry budget). */
  released: 'released',
} as const;
/** How an attempt ended. */
export type AttemptOutcome = (typeof AttemptOutcome)[keyof typeof AttemptOutcome];

/** The state of an attempt: `open` (its `outcome` is NULL) or how it ended. */
export const AttemptStatus = { open: 'open', ...AttemptOutcome } as const;
/** The state of an attempt: `open` or an {@link AttemptOutcome}. */
export type AttemptStatus = (typeof AttemptStatus)[keyof typeof AttemptStatus];

/** What a run executes (`runs.kind`, and `schedules.target_kind`). */
export const RunKind = { workflow: 'workflow', activity: 'activity' } as const;
/** What a run executes. */
export type RunKind = (typeof RunKind)[keyof typeof RunKind];

/** What a step is (`steps.kind`): a durable call of a workflow, or a standalone run's single activity. */
export const StepKind = {
  activity: 'activity',
  timer: 'timer',
  /** A signal wait (`ctx.waitForSignal`). */
  signal: 'signal',
  /** A child workflow run. */
  child: 'child',
  /** A value recorded by a turn (`ctx.now`, `ctx.random`, …), inserted already completed. */
  value: 'value',
} as const;
/** What a step is. */
export type StepKind = (typeof StepKind)[keyof typeof StepKind];

/** What an attempt claimed (`attempts.kind`): an activity step or a workflow turn. */
export const AttemptKind = { activity: 'activity', turn: 'turn' } as const;
/** What an attempt claimed. */
export type AttemptKind = (typeof AttemptKind)[keyof typeof AttemptKind];

/** Every run status, in lifecycle order. */
export const RUN_STATUSES: readonly RunStatus[] = Object.values(RunStatus);
/** Every step status, in lifecycle order. */
export const STEP_STATUSES: readonly StepStatus[] = Object.values(StepStatus);
/** Every stored attempt outcome. */
export const ATTEMPT_OUTCOMES: readonly AttemptOutcome[] = Object.values(AttemptOutcome);
/** Every attempt state, `open` first. */
export const ATTEMPT_STATUSES: readonly AttemptStatus[] = Object.values(AttemptStatus);
/** Every run kind. */
export const RUN_KINDS: readonly RunKind[] = Object.values(RunKind);
/** Every step kind. */
export const STEP_KINDS: readonly StepKind[] = Object.values(StepKind);
/** Every attempt kind. */
export const ATTEMPT_KINDS: readonly AttemptKind[] = Object.values(AttemptKind);

/** The statuses of a run that has not ended: `status IN ('pending', 'running')`. */
export const LIVE_RUN_STATUSES = [RunStatus.pending, RunStatus.running] as const;
/** The statuses of a run that has ended; only an operator's retry moves a run out of one (failed, cancelled). */
export const TERMINAL_RUN_STATUSES = [RunStatus.completed, RunStatus.failed, RunStatus.cancelled] as const;
/** The statuses of a step that has not ended: `status IN ('scheduled', 'running')`. */
export const LIVE_STEP_STATUSES = [StepStatus.scheduled, StepStatus.running] as const;
/** The statuses of a step that has ended; only an operator's retry moves a step out of one (failed, cancelled). */
export const TERMINAL_STEP_STATUSES = [
  StepStatus.completed,
  StepStatus.failed,
  StepStatus.cancelled,
] as const;
/** The ends a retry undoes, for runs and steps alike: `status IN ('failed', 'cancelled')`. */
export const UNSUCCESSFUL_STATUSES = [RunStatus.failed, RunStatus.cancelled] as const;

/** A run status with which the run has ended. */
export type TerminalRunStatus = (typeof TERMINAL_RUN_STATUSES)[number];
/** A step status with which the step has ended. */
export type TerminalStepStatus = (typeof TERMINAL_STEP_STATUSES)[number];
/** An unsuccessful end of a run or step (`failed` or `cancelled`): what a retry undoes. */
export type UnsuccessfulStatus = (typeof UNSUCCESSFUL_STATUSES)[number];

const has = <T extends string>(set: readonly T[], value: string): value is T =>
  (set as readonly string[]).includes(value);

/** Whether `status` (any string, as read from a row) is a run status with which the run has ended. */
export function isTerminalRunStatus(status: string): status is TerminalRunStatus {
  return has(TERMINAL_RUN_STATUSES, status);
}

/** Whether `status` is a run status of a run that has not ended (`pending` or `running`). */
export function isLiveRunStatus(status: string): status is (typeof LIVE_RUN_STATUSES)[number] {
  return has(LIVE_RUN_STATUSES, status);
}

/** Whether `status` (any string, as read from a row) is a step status with which the step has ended. */
export function isTerminalStepStatus(status: string): status is TerminalStepStatus {
  return has(TERMINAL_STEP_STATUSES, status);
}

/** Whether `status` is an unsuccessful end (`failed` or `cancelled`), of a run or a step: what a retry undoes. */
export function isUnsuccessfulStatus(status: string): status is UnsuccessfulStatus {
  return has(UNSUCCESSFUL_STATUSES, status);
}

/** Whether `value` is a run status. */
export function isRunStatus(value: string): value is RunStatus {
  return has(RUN_STATUSES, value);
}

/** Whether `value` is a step status. */
export function isStepStatus(value: string): value is StepStatus {
  return has(STEP_STATUSES, value);
}

/** Quote `value` as an SQL string literal (doubling any `'`). */
export function sqlLiteral(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

/**
 * Render `values` as the parenthesised SQL list an `IN` takes: `sqlList(LIVE_RUN_STATUSES)` is
 * `('pending', 'running')`. For `sql.raw` (the values are this module's constants, never input).
 * @throws RangeError when `values` is empty (`IN ()` is not SQL)
 */
export function sqlList(values: readonly string[]): string {
  if (values.length === 0) throw new RangeError('sqlList: an SQL IN list needs at least one value');
  return `(${values.map(sqlLiteral).join(', ')})`;
}
