import { randomUUID } from 'node:crypto';
import {
  ActivityFailure,
  CancelledFailure,
  InvalidOptionsError,
  MAX_SLEEP_MS,
  NonDeterminismError,
  PAYLOAD_LIMITS,
  PalisadeError,
  checkPayload,
  formatIssues,
  mergeRetryPolicy,
  serializeFailure,
  toMs,
  validate,
  type ActivityDefinition,
  type Duration,
  type ResolvedRetryPolicy,
  type RunActivityOptions,
  type SerializedFailure,
  type WorkflowContext,
  type WorkflowDefinition,
  type WorkflowInfo,
} from '@palisade/sdk';
import { z } from 'zod';
import { shorterLeaseMessage } from '../lease-override.js';
import type { HistoryStepRow } from '../queries/claim-turns.js';
import { originalRandom, trackNonDurable, type NonDurableSink } from './non-durable-await.js';

/** A durable call that has no recorded step yet. Durations in ms; due times are fixed by the DB clock at commit. */
type StepCall =
  | {
      readonly seq: number;
      readonly kind: 'activity';
      readonly name: string;
      readonly input: unknown;
      readonly queue: string;
      readonly priority: number;
      readonly retryPolicy: ResolvedRetryPolicy;
      readonly leaseMs: number;
      readonly startToCloseTimeoutMs: number;
      /** Recorded already cancelled, its rejection delivered at `deliveredSeq` (a cancel the code had not seen). */
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | {
      readonly seq: number;
      readonly kind: 'timer';
      readonly name: string;
      readonly delayMs?: number;
      readonly dueAtMs?: number;
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | { readonly seq: number; readonly kind: 'value'; readonly name: string; readonly output: unknown };

/**
 * A step a turn adds to its run: the call, and `afterDeliveredSeq`, the highest delivery order the code had
 * seen when it made the call (0: none yet), so a retry can tell the steps that depended on a withdrawn outcome.
 */
export type NewStep = StepCall & { readonly afterDeliveredSeq: number };

/** A recorded outcome this turn handed to the workflow code for the first time, in order. */
export interface Delivery {
  readonly stepId: string;
  readonly deliveredSeq: number;
  /** A timer this turn saw fire (due by the claim's DB time): the commit marks it completed. */
  readonly firesTimer: boolean;
}

export type TurnOutcome =
  | { readonly kind: 'blocked' }
  | { readonly kind: 'completed'; readonly output: unknown }
  | { readonly kind: 'failed'; readonly error: SerializedFailure }
  | { readonly kind: 'cancelled'; readonly error: SerializedFailure };

export interface TurnResult {
  readonly newSteps: readonly NewStep[];
  readonly deliveries: readonly Delivery[];
  readonly outcome: TurnOutcome;
  /** Calls the workflow code made that differ on replay (`Math.random()`, `Date.now()`), for a warning. */
  readonly nondeterministicCalls?: readonly string[];
}

export interface TurnInput {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflow: WorkflowDefinition<any, any>;
  readonly info: WorkflowInfo;
  readonly input: unknown;
  readonly priority: number;
  readonly history: readonly HistoryStepRow[];
  /** The claim's DB time (epoch ms): timers due by then fire in this turn. */
  readonly nowMs: number;
  readonly cancelRequested: boolean;
}

interface Deferred {
  readonly kind: string;
  readonly name: string;
  settled: boolean;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

/** A per-call lease may lengthen the activity's lease, never shorten it (see {@link shorterLeaseMessage}). */
function overrideLease(activity: ActivityDefinition, leaseMs: Duration | undefined): number {
  if (leaseMs === undefined) return activity.leaseMs;
  const ms = toMs(leaseMs, `leaseMs of ctx.run(${activity.name})`);
  if (ms < activity.leaseMs) {
    throw new InvalidOptionsError(`ctx.run options of ${activity.name}`, [
      { path: 'leaseMs', message: shorterLeaseMessage(activity.leaseMs, ms) },
    ]);
  }
  return ms;
}

/** The per-call options of `ctx.run`; durations are checked where they are used ({@link toMs}). */
const runActivityOptionsSchema = z
  .object({
    retry: z.unknown().optional(),
    startToCloseTimeoutMs: z.unknown().optional(),
    leaseMs: z.unknown().optional(),
    queue: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1–128 letters, digits, _ . : -')
      .optional(),
    priority: z.number().int('must be a whole number').min(-1000).max(1000).optional(),
  })
  .strict();

function macrotask(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function never<T>(): Promise<T> {
  return new Promise<T>(() => undefined);
}

/**
 * One turn of a workflow (a replay from the top over the recorded steps), without I/O: the caller loads the
 * history and commits the result. Pure with respect to the database; testable without one.
 *
 * Replay rules:
 * - each durable call takes the next position; a recorded step at that position must have the same kind and
 *   name, or the turn fails the run with {@link NonDeterminismError} — a recorded result is never handed to a
 *   different step;
 * - recorded outcomes are delivered one at a time, draining the workflow's microtasks in between, in the order
 *   earlier turns delivered them (`delivered_seq`), then new outcomes in the order they happened; so
 *   `Promise.race` and friends see the same winner on every replay;
 * - a call with no recorded step schedules a new one; the turn ends when the code blocks on pending steps;
 * - a cancel request the code has not seen through a cancelled step reaches it at the steps it is blocked on
 *   that this turn scheduled: they are recorded cancelled and their awaits reject with CancelledFailure.
 */
export async function runTurn(turn: TurnInput): Promise<TurnResult> {
  const nondeterministicCalls = new Set<string>();
  const result = await replayTurn(turn, nondeterministicCalls);
  return nondeterministicCalls.size > 0
    ? { ...result, nondeterministicCalls: [...nondeterministicCalls] }
    : result;
}

/**
 * What to add to a NonDeterminismError when the workflow code called `Math.random()` or `Date.now()`: the likelier
 * cause than a code change.
 */
function nondeterminismHint(calls: ReadonlySet<string>): string | undefined {
  if (calls.size === 0) return undefined;
  return (
    `This workflow's code called ${[...calls].join(' and ')}, which differ on replay: ` +
    'use ctx.random(), ctx.now() and ctx.uuid() instead.'
  );
}

async function replayTurn(turn: TurnInput, nondeterministicCalls: Set<string>): Promise<TurnResult> {
  const byPosition = new Map(turn.history.map((h) => [h.seq, h]));
  const requested = new Map<number, Deferred>();
  const newSteps: NewStep[] = [];
  const deliveries: Delivery[] = [];
  let position = 0;
  /** The highest delivery order handed to the code so far (recorded or new); 0 before the first. */
  let seenDeliveredSeq = 0;
  let fatal: PalisadeError | undefined;
  let closed = false;
  let nonDurable: string | undefined;
  /** The code was handed a CancelledFailure (a cancelled step's outcome) in this replay. */
  let cancelSeen = false;
  const workflowName = turn.workflow.name;

  const sink: NonDurableSink = {
    reportNonDurable(type) {
      if (!closed) nonDurable ??= type;
    },
    reportNondeterministic(call) {
      nondeterministicCalls.add(call);
    },
  };

  const nondeterminism = (seq: number, recorded: HistoryStepRow, kind: string, name: string): void => {
    fatal ??= new NonDeterminismError(
      workflowName,
      seq,
      `${recorded.kind} ${recorded.name}`,
      `${kind} ${name}`,
      turn.info.runId,
      nondeterminismHint(nondeterministicCalls),
    );
  };

  /** Claim the next position for a durable call; returns the recorded step, if any (after checking it). */
  const take = (kind: string, name: string): { seq: number; recorded?: HistoryStepRow; ok: boolean } => {
    const seq = position++;
    const recorded = byPosition.get(seq);
    if (recorded && (recorded.kind !== kind || recorded.name !== name)) {
      nondeterminism(seq, recorded, kind, name);
      return { seq, ok: false };
    }
    return recorded ? { seq, recorded, ok: true } : { seq, ok: true };
  };

  const durable = <T>(
    kind: 'activity' | 'timer',
    name: string,
    schedule: (seq: number) => StepCall,
  ): Promise<T> => {
    if (closed || fatal) return never<T>();
    const { seq, recorded, ok } = take(kind, name);
    if (!ok) return never<T>();
    if (!recorded) newSteps.push({ ...schedule(seq), afterDeliveredSeq: seenDeliveredSeq });
    return new Promise<T>((resolve, reject) => {
      requested.set(seq, {
        kind,
        name,
        settled: false,
        resolve: (v) => resolve(v as T),
        reject,
      });
    });
  };

  const value = <T>(name: string, make: () => T): T => {
    if (closed || fatal) return make();
    const { seq, recorded, ok } = take('value', name);
    if (recorded && ok) return recorded.output as T;
    const fresh = make();
    if (ok) newSteps.push({ seq, kind: 'value', name, output: fresh, afterDeliveredSeq: seenDeliveredSeq });
    return fresh;
  };

  const ctx: WorkflowContext = {
    info: turn.info,
    run: <O>(activity: ActivityDefinition, input: unknown, options: RunActivityOptions = {}) => {
      if (!activity || activity.kind !== 'activity') {
        fatal ??= new PalisadeError(
          'INVALID_OPTIONS',
          `workflow ${workflowName} called ctx.run with something that is not an activity from defineActivity()`,
        );
        return never<O>();
      }
      const parsedOptions = runActivityOptionsSchema.safeParse(options);
      if (!parsedOptions.success) {
        throw new InvalidOptionsError(
          `ctx.run options of ${activity.name} in workflow ${workflowName}`,
          formatIssues(parsedOptions.error.issues),
        );
      }
      const inputOf = (seq: number): unknown => {
        const what = `input of activity ${activity.name} (step ${seq} of ${workflowName})`;
        const checked: unknown = validate(activity.input, input, what);
        // A copy, as it is at the call: the code may change the object before the turn commits.
        return JSON.parse(checkPayload(checked, what, PAYLOAD_LIMITS.inputBytes, { runId: turn.info.runId }));
      };
      return durable<O>('activity', activity.name, (seq) => ({
        seq,
        kind: 'activity',
        name: activity.name,
        input: inputOf(seq),
        queue: options.queue ?? activity.queue,
        priority: options.priority ?? turn.priority,
        retryPolicy: mergeRetryPolicy(activity.retry, options.retry, `retry of ${activity.name}`),
        leaseMs: overrideLease(activity, options.leaseMs),
        startToCloseTimeoutMs:
          options.startToCloseTimeoutMs !== undefined
            ? toMs(options.startToCloseTimeoutMs, `startToCloseTimeoutMs of ctx.run(${activity.name})`)
            : activity.startToCloseTimeoutMs,
      }));
    },
    sleep: (duration: Duration) => {
      const delayMs = toMs(duration, `ctx.sleep duration in workflow ${workflowName}`, MAX_SLEEP_MS);
      return durable<void>('timer', 'sleep', (seq) => ({ seq, kind: 'timer', name: 'sleep', delayMs }));
    },
    sleepUntil: (date: Date) => {
      const dueAtMs = date instanceof Date ? date.getTime() : Number.NaN;
      if (!Number.isFinite(dueAtMs)) {
        const given = date as unknown;
        const got =
          given instanceof Date
            ? 'an invalid Date'
            : typeof given === 'string'
              ? `the string ${JSON.stringify(given.slice(0, 40))}`
              : typeof given;
        throw new InvalidOptionsError(`ctx.sleepUntil in workflow ${workflowName}`, [
          { path: 'date', message: `must be a valid Date, got ${got} (use new Date(...) around a string)` },
        ]);
      }
      return durable<void>('timer', 'sleep', (seq) => ({ seq, kind: 'timer', name: 'sleep', dueAtMs }));
    },
    // Whole ms, as a Date holds them: the recorded value is exactly what the code saw (the DB clock has µs).
    now: () => new Date(value('now', () => Math.floor(turn.nowMs))),
    random: () => value('random', () => originalRandom()),
    uuid: () => value('uuid', () => randomUUID()),
  };

  // Start the workflow code; it runs until it blocks on durable calls.
  let settled: { ok: true; value: unknown } | { ok: false; error: unknown } | undefined;
  const tracking = trackNonDurable(sink, () => {
    Promise.resolve()
      .then(() =>
        turn.workflow.run(
          validate(turn.workflow.input, turn.input, `input of workflow ${workflowName}`),
          ctx,
        ),
      )
      .then(
        (v: unknown) => (settled = { ok: true, value: v }),
        (e: unknown) => (settled = { ok: false, error: e }),
      );
  });
  await macrotask();

  // Deliver recorded outcomes: first in the order earlier turns delivered them, then new ones as they happened.
  const outcomeOf = (h: HistoryStepRow): 'resolve' | 'reject' | undefined => {
    if (h.kind === 'timer') {
      if (h.status === 'completed') return 'resolve';
      if (h.status === 'cancelled') return 'reject';
      if (h.status === 'scheduled' && h.due_ms !== null && h.due_ms <= turn.nowMs) return 'resolve';
      return undefined;
    }
    if (h.kind === 'activity' && TERMINAL.has(h.status))
      return h.status === 'completed' ? 'resolve' : 'reject';
    return undefined;
  };
  const delivered = turn.history
    .filter((h) => h.delivered_seq !== null)
    .sort((a, b) => (a.delivered_seq as number) - (b.delivered_seq as number));
  const fresh = turn.history
    .filter((h) => h.delivered_seq === null && (h.kind === 'activity' || h.kind === 'timer') && outcomeOf(h))
    .sort((a, b) => (a.finished_ms ?? a.due_ms ?? 0) - (b.finished_ms ?? b.due_ms ?? 0) || a.seq - b.seq);
  let nextDeliveredSeq = delivered.reduce((m, h) => Math.max(m, h.delivered_seq as number), 0) + 1;

  const deliver = (h: HistoryStepRow): void => {
    const d = requested.get(h.seq);
    if (!d || d.settled) return;
    d.settled = true;
    if (outcomeOf(h) === 'resolve') d.resolve(h.kind === 'timer' ? undefined : h.output);
    else if (h.status === 'cancelled') {
      cancelSeen = true;
      d.reject(
        new CancelledFailure(`step ${h.name}#${h.seq} was cancelled`, {
          runId: turn.info.runId,
          stepId: h.id,
        }),
      );
    } else
      d.reject(
        new ActivityFailure(h.name, h.error as SerializedFailure, { runId: turn.info.runId, stepId: h.id }),
      );
  };

  for (const h of delivered) {
    if (settled || fatal || nonDurable) break;
    if (!requested.has(h.seq)) {
      fatal ??= new NonDeterminismError(
        workflowName,
        h.seq,
        `${h.kind} ${h.name} (delivered in an earlier turn)`,
        position > h.seq ? 'a call that did not await it' : 'no call at that position yet',
        turn.info.runId,
        nondeterminismHint(nondeterministicCalls),
      );
      break;
    }
    seenDeliveredSeq = h.delivered_seq as number;
    deliver(h);
    await macrotask();
  }
  const remaining = [...fresh];
  const running = () => !settled && !fatal && !nonDurable;
  while (running()) {
    const index = remaining.findIndex((h) => requested.has(h.seq));
    if (index >= 0) {
      const [h] = remaining.splice(index, 1) as [HistoryStepRow];
      seenDeliveredSeq = nextDeliveredSeq;
      deliver(h);
      deliveries.push({
        stepId: h.id,
        deliveredSeq: nextDeliveredSeq++,
        firesTimer: h.kind === 'timer' && h.status === 'scheduled',
      });
      await macrotask();
      continue;
    }
    // Blocked. A cancel requested before any step it could end existed (before the first turn, or while a
    // turn that did not know of it was scheduling) has not reached the code: the steps this turn scheduled and
    // the code is blocked on are recorded cancelled, as the request would have ended them, and their awaits
    // reject one at a time in position order (recorded by delivered_seq, so replay repeats it). What the code
    // schedules after seeing the cancel (compensation in catch/finally) runs normally.
    if (!turn.cancelRequested || cancelSeen) break;
    const blockedOn = newSteps.filter((s) => s.kind !== 'value' && requested.get(s.seq)?.settled === false);
    if (blockedOn.length === 0) break;
    for (const s of blockedOn) {
      if (!running()) break;
      const d = requested.get(s.seq) as Deferred;
      d.settled = true;
      cancelSeen = true;
      seenDeliveredSeq = nextDeliveredSeq;
      newSteps[newSteps.indexOf(s)] = { ...s, cancelled: true, deliveredSeq: nextDeliveredSeq++ } as NewStep;
      d.reject(new CancelledFailure(`step ${s.name}#${s.seq} was cancelled`, { runId: turn.info.runId }));
      await macrotask();
    }
  }
  closed = true;
  tracking.end();

  // Code that ends before reaching a recorded step no longer accounts for its history (the step was removed,
  // or moved after the return): stop the run rather than complete it over work the code does not know of.
  const unreached = settled && !nonDurable ? turn.history.find((h) => h.seq >= position) : undefined;
  if (unreached) {
    fatal ??= new NonDeterminismError(
      workflowName,
      unreached.seq,
      `${unreached.kind} ${unreached.name}`,
      'no call (the workflow ended first)',
      turn.info.runId,
      nondeterminismHint(nondeterministicCalls),
    );
  }

  if (fatal)
    return { newSteps: [], deliveries: [], outcome: { kind: 'failed', error: serializeFailure(fatal) } };
  if (nonDurable) {
    const error = new PalisadeError(
      'NON_DURABLE_AWAIT',
      `workflow ${workflowName} started a ${nonDurable} (a timer or I/O) inside workflow code; workflow code may ` +
        'only await ctx.run, ctx.sleep and ctx.sleepUntil — move the work into an activity',
      { runId: turn.info.runId },
    );
    return { newSteps: [], deliveries: [], outcome: { kind: 'failed', error: serializeFailure(error) } };
  }
  const done = settled;
  if (!done) {
    const pending =
      [...requested.values()].filter((d) => !d.settled).length +
      newSteps.filter((s) => s.kind !== 'value' && !s.cancelled).length;
    if (pending === 0) {
      const error = new PalisadeError(
        'NON_DURABLE_AWAIT',
        `workflow ${workflowName} is waiting on a promise that is not a durable primitive (no step is pending); ` +
          'workflow code may only await ctx.run, ctx.sleep and ctx.sleepUntil',
        { runId: turn.info.runId },
      );
      return { newSteps: [], deliveries: [], outcome: { kind: 'failed', error: serializeFailure(error) } };
    }
    return { newSteps, deliveries, outcome: { kind: 'blocked' } };
  }
  if (done.ok) {
    try {
      const what = `output of workflow ${workflowName}`;
      const output: unknown = validate(turn.workflow.output, done.value, what, { runId: turn.info.runId });
      // An output the database cannot store (or that would not come back from result() as it is) fails the run
      // here, recorded, rather than a commit that fails and replays the turn forever.
      checkPayload(output, what, PAYLOAD_LIMITS.outputBytes, { runId: turn.info.runId });
      return { newSteps, deliveries, outcome: { kind: 'completed', output } };
    } catch (error) {
      return { newSteps, deliveries, outcome: { kind: 'failed', error: serializeFailure(error) } };
    }
  }
  const error = serializeFailure(done.error);
  const cancelled =
    turn.cancelRequested && (done.error as { code?: unknown } | undefined)?.code === 'CANCELLED';
  return {
    newSteps,
    deliveries,
    outcome: cancelled ? { kind: 'cancelled', error } : { kind: 'failed', error },
  };
}
