/**
 * The transition tables of the run, step and attempt machines (DESIGN.md §4): for every move, from → to, the event
 * and the statements that make it, and the kinds of row it applies to; with the questions asked of them and the
 * mermaid diagrams `STATE-MACHINE.md` holds (checked against these tables by `state-machine.test.ts`). Pure.
 */
import {
  ATTEMPT_KINDS,
  ATTEMPT_OUTCOMES,
  ATTEMPT_STATUSES,
  AttemptKind,
  RUN_KINDS,
  RUN_STATUSES,
  RunKind,
  STEP_KINDS,
  STEP_STATUSES,
  StepKind,
  TERMINAL_RUN_STATUSES,
  TERMINAL_STEP_STATUSES,
  type AttemptStatus,
  type RunStatus,
  type StepStatus,
} from './state-machine.js';

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
      from: INSERTED,
      to: 'failed',
      event: 'fused turn failed the run',
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
    {
      from: 'open',
      to: 'failed',
      event: 'fail, or turn failed the run',
      kinds: [ACTIVITY_ATTEMPT, TURN],
      statements: ['fail-step', 'commit-turn'],
    },
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
