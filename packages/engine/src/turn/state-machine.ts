/**
 * The run, step and attempt state machines (DESIGN.md §4), in one place: the statuses as `as const` objects with
 * their union types, the sets the statements test (live, terminal), the kinds of row each machine covers, and a
 * transition table naming, for every move, the event and the statements that make it. TypeScript types, the SQL
 * texts (through {@link sqlList}) and the CHECK constraints of `schema/tables.ts` all derive from here; the
 * diagrams in `STATE-MACHINE.md` are checked against the table by `state-machine.test.ts`.
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

/** Where a row begins: the `from` of the transitions that insert it (mermaid's `[*]`). */
export const INSERTED = '[*]';

/** One move of a machine: from → to, on which event, made by which statements, for which kinds of row. */
export interface Transition<S extends string, K extends string> {
  /** The status before, or {@link INSERTED} for the insert that creates the row with status `to`. */
  readonly from: S | typeof INSERTED;
  readonly to: S;
  /** What happens, in a few words (the diagram's edge label). */
  readonly event: string;
  /** The kinds of row the move applies to. */
  readonly kinds: readonly K[];
  /** The statements (files under `queries/`, without `.ts`) that make it. */
  readonly statements: readonly string[];
  /** True for a move only an operator makes (`palisade runs retry`), out of a terminal status. */
  readonly operator?: true;
}

/** One state machine: its statuses, its kinds of row, its terminal statuses and its transitions. */
export interface StateMachine<S extends string, K extends string> {
  readonly name: string;
  readonly statuses: readonly S[];
  readonly kinds: readonly K[];
  /** Statuses that no engine transition leaves (only an {@link Transition.operator} one may). */
  readonly terminal: readonly S[];
  readonly transitions: readonly Transition<S, K>[];
}

const W = RunKind.workflow;
const A = RunKind.activity;

/** The run machine: workflow runs (moved by their turns) and standalone activity runs (moved by their step). */
export const RUN_MACHINE: StateMachine<RunStatus, RunKind> = {
  name: 'run',
  statuses: RUN_STATUSES,
  kinds: RUN_KINDS,
  terminal: TERMINAL_RUN_STATUSES,
  transitions: [
    {
      from: INSERTED,
      to: 'pending',
      event: 'start',
      kinds: [W, A],
      statements: ['insert-workflow-run', 'insert-standalone-run', 'fire-schedule-ticks', 'commit-turn'],
    },
    {
      from: INSERTED,
      to: 'running',
      event: 'start with eager turn',
      kinds: [W],
      statements: ['insert-workflow-run'],
    },
    {
      from: 'pending',
      to: 'running',
      event: 'claim first turn',
      kinds: [W],
      statements: ['claim-turns', 'commit-turn'],
    },
    { from: 'pending', to: 'completed', event: 'step completed', kinds: [A], statements: ['complete-step'] },
    {
      from: 'pending',
      to: 'failed',
      event: 'step failed',
      kinds: [A],
      statements: ['fail-step', 'expire-steps'],
    },
    {
      from: 'pending',
      to: 'cancelled',
      event: 'cancel',
      kinds: [W, A],
      statements: ['request-cancel', 'fail-step', 'expire-steps'],
    },
    { from: 'running', to: 'completed', event: 'turn returned', kinds: [W], statements: ['commit-turn'] },
    { from: 'running', to: 'failed', event: 'turn failed', kinds: [W], statements: ['commit-turn'] },
    { from: 'running', to: 'cancelled', event: 'turn ended cancel', kinds: [W], statements: ['commit-turn'] },
    {
      from: 'failed',
      to: 'pending',
      event: 'retry',
      kinds: [W, A],
      statements: ['retry-run'],
      operator: true,
    },
    {
      from: 'cancelled',
      to: 'pending',
      event: 'retry',
      kinds: [W, A],
      statements: ['retry-run'],
      operator: true,
    },
  ],
};

const ACT = StepKind.activity;
const TIMER = StepKind.timer;
const SIGNAL = StepKind.signal;
const CHILD = StepKind.child;
const VALUE = StepKind.value;

/** The step machine: every step kind, from the turn commit that inserts it to its end. */
export const STEP_MACHINE: StateMachine<StepStatus, StepKind> = {
  name: 'step',
  statuses: STEP_STATUSES,
  kinds: STEP_KINDS,
  terminal: TERMINAL_STEP_STATUSES,
  transitions: [
    {
      from: INSERTED,
      to: 'scheduled',
      event: 'schedule',
      kinds: [ACT, TIMER, SIGNAL],
      statements: ['commit-turn', 'insert-standalone-run', 'fire-schedule-ticks'],
    },
    {
      from: INSERTED,
      to: 'running',
      event: 'eager claim or child started',
      kinds: [ACT, CHILD],
      statements: ['commit-turn'],
    },
    {
      from: INSERTED,
      to: 'completed',
      event: 'recorded or already delivered',
      kinds: [VALUE, SIGNAL, CHILD],
      statements: ['commit-turn'],
    },
    { from: INSERTED, to: 'failed', event: 'child key taken', kinds: [CHILD], statements: ['commit-turn'] },
    {
      from: INSERTED,
      to: 'cancelled',
      event: 'scheduled as the run ends or cancelled',
      kinds: [ACT, TIMER, SIGNAL, CHILD],
      statements: ['commit-turn'],
    },
    { from: 'scheduled', to: 'running', event: 'claim', kinds: [ACT], statements: ['claim-steps'] },
    {
      from: 'scheduled',
      to: 'completed',
      event: 'timer fired or signal delivered',
      kinds: [TIMER, SIGNAL],
      statements: ['commit-turn'],
    },
    {
      from: 'scheduled',
      to: 'cancelled',
      event: 'cancel, run end or retire',
      kinds: [ACT, TIMER, SIGNAL],
      statements: ['request-cancel', 'commit-turn', 'retry-run'],
    },
    {
      from: 'running',
      to: 'running',
      event: 'reclaim after lease expiry',
      kinds: [ACT],
      statements: ['claim-steps'],
    },
    {
      from: 'running',
      to: 'scheduled',
      event: 'retryable failure or release',
      kinds: [ACT],
      statements: ['fail-step', 'release-step'],
    },
    {
      from: 'running',
      to: 'completed',
      event: 'complete or child completed',
      kinds: [ACT, CHILD],
      statements: ['complete-step', 'commit-turn'],
    },
    {
      from: 'running',
      to: 'failed',
      event: 'fail, attempts exhausted or child ended unsuccessfully',
      kinds: [ACT, CHILD],
      statements: ['fail-step', 'expire-steps', 'commit-turn', 'request-cancel'],
    },
    {
      from: 'running',
      to: 'cancelled',
      event: 'cancel, run end or retire',
      kinds: [ACT, CHILD],
      statements: ['request-cancel', 'fail-step', 'expire-steps', 'commit-turn', 'retry-run'],
    },
    {
      from: 'failed',
      to: 'scheduled',
      event: 'retry',
      kinds: [ACT, TIMER, SIGNAL],
      statements: ['retry-run'],
      operator: true,
    },
    {
      from: 'cancelled',
      to: 'scheduled',
      event: 'retry',
      kinds: [ACT, TIMER, SIGNAL],
      statements: ['retry-run'],
      operator: true,
    },
  ],
};

const TURN = AttemptKind.turn;
const ACTIVITY_ATTEMPT = AttemptKind.activity;

/** The attempt machine: one claim of an activity step or of a workflow turn, open until one outcome ends it. */
export const ATTEMPT_MACHINE: StateMachine<AttemptStatus, AttemptKind> = {
  name: 'attempt',
  statuses: ATTEMPT_STATUSES,
  kinds: ATTEMPT_KINDS,
  terminal: ATTEMPT_OUTCOMES,
  transitions: [
    {
      from: INSERTED,
      to: 'open',
      event: 'claim',
      kinds: [ACTIVITY_ATTEMPT, TURN],
      statements: ['claim-steps', 'claim-turns', 'complete-step', 'commit-turn', 'insert-workflow-run'],
    },
    {
      from: INSERTED,
      to: 'completed',
      event: 'fused turn committed',
      kinds: [TURN],
      statements: ['commit-turn'],
    },
    {
      from: 'open',
      to: 'completed',
      event: 'complete or turn committed',
      kinds: [ACTIVITY_ATTEMPT, TURN],
      statements: ['complete-step', 'commit-turn'],
    },
    { from: 'open', to: 'failed', event: 'fail', kinds: [ACTIVITY_ATTEMPT], statements: ['fail-step'] },
    {
      from: 'open',
      to: 'lease_expired',
      event: 'reclaimed or swept after expiry',
      kinds: [ACTIVITY_ATTEMPT, TURN],
      statements: ['claim-steps', 'claim-turns', 'complete-step', 'expire-steps'],
    },
    {
      from: 'open',
      to: 'timed_out',
      event: 'start-to-close passed',
      kinds: [ACTIVITY_ATTEMPT],
      statements: ['fail-step', 'claim-steps', 'expire-steps'],
    },
    {
      from: 'open',
      to: 'rejected_stale',
      event: 'owner write refused',
      kinds: [ACTIVITY_ATTEMPT, TURN],
      statements: ['fenced-outcome', 'heartbeat-steps', 'commit-turn'],
    },
    {
      from: 'open',
      to: 'cancelled',
      event: 'cancel, run end or retire',
      kinds: [ACTIVITY_ATTEMPT],
      statements: ['request-cancel', 'fail-step', 'commit-turn', 'retry-run'],
    },
    {
      from: 'open',
      to: 'released',
      event: 'release',
      kinds: [ACTIVITY_ATTEMPT, TURN],
      statements: ['release-step', 'commit-turn'],
    },
  ],
};

/** The three machines by name. */
export const STATE_MACHINES = { run: RUN_MACHINE, step: STEP_MACHINE, attempt: ATTEMPT_MACHINE } as const;
/** The name of a machine. */
export type MachineName = keyof typeof STATE_MACHINES;
type StatusOf<M extends MachineName> =
  (typeof STATE_MACHINES)[M] extends StateMachine<infer S, string> ? S : never;

/**
 * Whether machine `machine` has a transition `from` → `to` (an engine or an operator one).
 * @param from a status, or {@link INSERTED} to ask whether a row may be inserted with status `to`
 */
export function canTransition<M extends MachineName>(
  machine: M,
  from: StatusOf<M> | typeof INSERTED,
  to: StatusOf<M>,
): boolean {
  const transitions: readonly Transition<string, string>[] = STATE_MACHINES[machine].transitions;
  return transitions.some((t) => t.from === from && t.to === to);
}

/** The statuses machine `machine` may move to from `from` (each once, in table order). */
export function nextStatuses<M extends MachineName>(
  machine: M,
  from: StatusOf<M> | typeof INSERTED,
): StatusOf<M>[] {
  const transitions: readonly Transition<string, string>[] = STATE_MACHINES[machine].transitions;
  const to = transitions.filter((t) => t.from === from).map((t) => t.to as StatusOf<M>);
  return [...new Set(to)];
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

/**
 * The mermaid `stateDiagram-v2` of `machine`, one edge per transition: `from --> to : event [kinds]`, operator
 * moves marked `(operator)`. `STATE-MACHINE.md` holds these diagrams; its test checks they match.
 */
export function mermaidDiagram(machine: StateMachine<string, string>): string {
  const edges = machine.transitions.map(
    (t) => `    ${t.from} --> ${t.to} : ${t.event} [${t.kinds.join(', ')}]${t.operator ? ' (operator)' : ''}`,
  );
  return ['```mermaid', 'stateDiagram-v2', ...edges, '```'].join('\n');
}
