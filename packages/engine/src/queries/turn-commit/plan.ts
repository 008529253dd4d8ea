import { sql, type SQL } from 'drizzle-orm';
import type { RejectedSignal, TurnOutcome } from '../../turn/contract.js';
import { msInterval } from '../schema-names.js';
import { newStepRow, type NewStepRow } from './new-step-row.js';
import type { EagerDispatch, FusedTurnRef, TurnGrant, TurnRecord } from './types.js';

/** An outcome the turn delivered, as the commit's `dl` CTE reads it (`jsonb_to_recordset`), in its column order. */
export interface DeliveryRow {
  /** The step's id; null for a wait completed by position (the live step at `seq`). */
  id: string | null;
  seq: number | null;
  delivered_seq: number | null;
  fires_timer: boolean;
  signal_id: string | null;
}

/** What the turn commit is planned from: who holds the turn, what its code decided, and the eager dispatch. */
export interface TurnCommitInput {
  readonly grant: TurnGrant;
  readonly result: TurnRecord;
  readonly dispatch: EagerDispatch;
}

/**
 * Every switch of the turn commit's statement, and the values its pieces share, computed once from its input
 * ({@link planTurnCommit}). A piece of the statement reads the plan and nothing else; a switch leaves a piece's
 * CTEs out of the statement when the turn has nothing for them (each combination is its own prepared text).
 */
export interface TurnCommitPlan {
  readonly grant: TurnGrant;
  /** A fused step's ref; undefined for a claimed turn. */
  readonly fused: FusedTurnRef | undefined;
  readonly runId: string;
  /** `runs.wake_count` as the turn saw it: a commit that finds it moved gives the run its next turn now. */
  readonly wakeCount: number;
  /**
   * When the outcomes the turn gives steps are recorded as finished (epoch ms, whole): the turn's own time, see
   * {@link outcomesAt}.
   */
  readonly outcomesAtMs: number;
  /** Switch: the turn ends the run (its outcome is not `blocked`). */
  readonly ending: boolean;
  /** The run's end status, or null when it goes on. */
  readonly status: Exclude<TurnOutcome['kind'], 'blocked'> | null;
  /** The run's output (JSON text) when it completes, else null. */
  readonly output: string | null;
  /** The run's error (JSON text) when it fails or is cancelled, else null. */
  readonly error: string | null;
  /** Switch (non-null): the progress the turn set (JSON text). */
  readonly progress: string | null;
  /** A cancel requested after the claim conflicts with this turn (it goes on waiting on new timers or activities). */
  readonly cancelSensitive: boolean;
  readonly steps: readonly NewStepRow[];
  /** Switch: a new step names a concurrency key or a rate limit (flow-control.ts). */
  readonly flowKeyed: boolean;
  /** Switch: the turn has new steps (their `step:scheduled` and kin events, `scheduled_events`). */
  readonly schedules: boolean;
  /**
   * Switch: a new step may be inserted cancelled — recorded so by the code, or scheduled by a turn that ends the
   * run (`cancelled_events`).
   */
  readonly insertsCancelled: boolean;
  /** Switch: the turn saw a timer (or a signal wait's timeout) fire (`fired_events`). */
  readonly firesTimers: boolean;
  /** The outcomes delivered, and a fused step's completed step (undelivered when the code did not take it). */
  readonly deliveries: readonly DeliveryRow[];
  /** The pending signals the turn hands to waits (recorded ones and new ones), as ids. */
  readonly takenSignals: readonly string[];
  /** `takenSignals` as a PostgreSQL array literal. */
  readonly takenSignalsArray: string;
  readonly rejected: readonly RejectedSignal[];
  /** Switch: a wait refused a pending signal. */
  readonly rejecting: boolean;
  /** The taken and the refused signals as a PostgreSQL array literal: those a run's end leaves alone. */
  readonly settledSignalsArray: string;
  /** Switch: the turn starts child runs (in this statement). */
  readonly startsChildren: boolean;
  /** Switch: a child it starts names a key (checked against existing runs). */
  readonly childKeys: boolean;
  /** Switch: the turn hands out signals. */
  readonly signalsTaken: boolean;
  /** Switch: the turn completes a wait by position (a kept instance does not know its id). */
  readonly byPosition: boolean;
  /** A fused step's completed step; null for a claimed turn. */
  readonly fusedStepId: string | null;
  readonly dispatch: EagerDispatch;
}

/** Compute the turn commit's switches and shared values once (see {@link TurnCommitPlan}). Pure. */
export function planTurnCommit(input: TurnCommitInput): TurnCommitPlan {
  const { grant, result, dispatch } = input;
  const fused = grant.kind === 'fused' ? grant.fused : undefined;
  const cancelRequested = grant.kind === 'claimed' ? grant.ref.cancelRequested : false;
  const outcome = result.outcome;
  const ending = outcome.kind !== 'blocked';
  const steps = result.newSteps.map(newStepRow);
  const deliveries = deliveryRows(result, fused);
  const takenSignals = [
    ...deliveries.flatMap((d) => (d.signal_id === null ? [] : [d.signal_id])),
    ...steps.flatMap((st) => (st.signal_id === null ? [] : [st.signal_id])),
  ];
  const rejected = result.rejectedSignals ?? [];
  const startsChildren = steps.some((st) => st.kind === 'child' && st.status === 'running');
  return {
    grant,
    fused,
    runId: grant.kind === 'claimed' ? grant.ref.runId : grant.fused.runId,
    wakeCount: grant.kind === 'claimed' ? grant.ref.wakeCount : grant.fused.wakeCount,
    outcomesAtMs: Math.floor(grant.kind === 'claimed' ? grant.ref.nowMs : grant.fused.nowMs),
    ending,
    status: ending ? outcome.kind : null,
    output: outcome.kind === 'completed' ? JSON.stringify(outcome.output ?? null) : null,
    error: outcome.kind === 'failed' || outcome.kind === 'cancelled' ? JSON.stringify(outcome.error) : null,
    progress: result.progress ? JSON.stringify(result.progress.value ?? null) : null,
    cancelSensitive: !cancelRequested && !ending && result.newSteps.some((s) => s.kind !== 'value'),
    steps,
    flowKeyed: steps.some((s) => s.concurrency_key !== null || s.rate_key !== null),
    schedules: steps.length > 0,
    insertsCancelled: ending ? steps.length > 0 : steps.some((s) => s.status === 'cancelled'),
    firesTimers: deliveries.some((d) => d.fires_timer),
    deliveries,
    takenSignals,
    takenSignalsArray: `{${takenSignals.join(',')}}`,
    rejected,
    rejecting: rejected.length > 0,
    settledSignalsArray: `{${[...takenSignals, ...rejected.map((r) => r.signalId)].join(',')}}`,
    startsChildren,
    childKeys: startsChildren && result.newSteps.some((st) => st.kind === 'child' && st.key !== null),
    // What only a turn that hands out signals, or completes a wait by position, needs: left out of the statement
    // otherwise (its own prepared text), so a turn of a run without signals pays for none of it.
    signalsTaken: takenSignals.length > 0,
    byPosition: deliveries.some((d) => d.id === null),
    fusedStepId: fused?.completion.stepId ?? null,
    dispatch,
  };
}

/** The outcomes delivered; a fused step's completed step is locked and written with them (undelivered if not taken). */
function deliveryRows(result: TurnRecord, fused: FusedTurnRef | undefined): DeliveryRow[] {
  const deliveries: DeliveryRow[] = result.deliveries.map((d) => ({
    id: d.stepId,
    seq: d.seq,
    delivered_seq: d.deliveredSeq,
    fires_timer: d.firesTimer,
    signal_id: d.signalId ?? null,
  }));
  if (fused && !deliveries.some((d) => d.id === fused.completion.stepId)) {
    deliveries.push({
      id: fused.completion.stepId,
      seq: null,
      delivered_seq: null,
      fires_timer: false,
      signal_id: null,
    });
  }
  return deliveries;
}

/**
 * When the outcomes this turn gives steps (a timer it saw fire, a signal it handed a wait, a step it recorded
 * cancelled, a fused step's completion) are recorded as finished: the turn's own whole ms, which is what the
 * workflow's clock read after them in this turn (workflowClockAfter), so that a replay, reading it back as
 * `finished_ms`, gives the code the same `Date.now()`. Not the commit's clock: the turn ran before it.
 */
export function outcomesAt(plan: TurnCommitPlan): SQL {
  return sql`('epoch'::timestamptz + ${msInterval(sql`${plan.outcomesAtMs}::bigint`)})`;
}
