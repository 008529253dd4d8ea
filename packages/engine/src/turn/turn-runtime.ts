import { randomUUID } from 'node:crypto';
import {
  ActivityFailure,
  CancelledFailure,
  ChildWorkflowFailure,
  InvalidOptionsError,
  MAX_SLEEP_MS,
  NonDeterminismError,
  PAYLOAD_LIMITS,
  PalisadeError,
  checkPayload,
  concurrencyLimitSchema,
  formatIssues,
  instantProblem,
  mergeRetryPolicy,
  rateLimitSchema,
  serializeFailure,
  textProblem,
  toMs,
  validate,
  type ActivityDefinition,
  type Duration,
  type ResolvedRateLimit,
  type ResolvedRetryPolicy,
  type RunActivityOptions,
  type RunChildOptions,
  type SerializedFailure,
  type SignalDefinition,
  type WorkflowContext,
  type WorkflowDefinition,
  type WorkflowInfo,
} from '@palisade/sdk';
import { z } from 'zod';
import { shorterLeaseMessage } from '../lease-override.js';
import type { HistoryStepRow, PendingSignal } from '../queries/claim-turns.js';
import {
  originalRandom,
  settleMicrotasks,
  trackNonDurable,
  type NonDurableSink,
} from '../worker/non-durable-await.js';
import { seededRandom } from './seeded-random.js';

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
      readonly concurrency?: { readonly key: string; readonly limit: number } | undefined;
      readonly rateLimit?: ResolvedRateLimit | undefined;
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
  | {
      readonly seq: number;
      readonly kind: 'signal';
      /** The signal's name. */
      readonly name: string;
      /** The wait's timeout, if any: it times out `timeoutMs` after it starts, by the DB clock. */
      readonly timeoutMs?: number;
      /** The pending signal this turn handed to the wait as soon as it was made (it arrived before the wait). */
      readonly signalId?: string;
      readonly cancelled?: boolean;
      readonly deliveredSeq?: number;
    }
  | {
      readonly seq: number;
      readonly kind: 'child';
      /** The child's workflow name. */
      readonly name: string;
      /** The child run's id, chosen here so that the step records it; the commit creates the run with it. */
      readonly childRunId: string;
      readonly input: unknown;
      readonly key: string | null;
      readonly queue: string;
      readonly priority: number;
      readonly cancellation: 'cascade' | 'abandon';
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
  /** The step's id, or null for the live step at position `seq` (a wait recorded by a turn of a kept instance). */
  readonly stepId: string | null;
  readonly seq: number;
  readonly deliveredSeq: number;
  /**
   * A timer this turn saw fire, or a signal wait it saw time out (due by the claim's DB time): the commit marks it
   * completed.
   */
  readonly firesTimer: boolean;
  /** A pending signal this turn handed to the signal wait at `seq`: the commit records the wait completed with it. */
  readonly signalId?: string;
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
  /** The last `ctx.setProgress` value of this turn's run of the code (replay included), if it set one. */
  readonly progress?: { readonly value: unknown };
  /**
   * Pending signals this turn refused at the wait they reached: their payload failed that wait's schema. The commit
   * records each undelivered (`signals.undelivered`), and the wait goes on waiting for a payload it can take.
   */
  readonly rejectedSignals?: readonly RejectedSignal[];
}

/** A pending signal a wait refused: its payload failed the schema of the wait at `seq` (`message` says how). */
export interface RejectedSignal {
  readonly signalId: string;
  readonly seq: number;
  readonly message: string;
}

/** What one turn runs with, besides the history: from the turn's claim. */
export interface TurnParams {
  readonly info: WorkflowInfo;
  /** The run's priority: the default of the activities it schedules. */
  readonly priority: number;
  /**
   * The claim's DB time (epoch ms): timers due by then fire in this turn; `ctx.now()` records it. The outcomes this
   * turn gives steps (a timer fired, a signal taken, a step cancelled) are recorded as finished at its whole ms
   * (`Math.floor(nowMs)`), the workflow's clock after them ({@link workflowClockAfter}): the commit writes that.
   */
  readonly nowMs: number;
  /**
   * The run's start (`runs.started_at`, epoch ms; set by its first turn grant and never changed): the workflow's
   * clock before any outcome reached its code. Default: `nowMs` (a run's first turn, in unit tests).
   */
  readonly startedMs?: number;
  readonly cancelRequested: boolean;
  /**
   * The run's pending signals in arrival order (`ClaimedTurnRow.signals`): the turn hands them to the code's waits.
   * None for a fused step's turn, which sees only its completion (its commit keeps the run due when a pending
   * signal matches a wait).
   */
  readonly signals?: readonly PendingSignal[];
}

/** A turn that replays the workflow code from the top. */
export interface TurnInput extends TurnParams {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflow: WorkflowDefinition<any, any>;
  readonly input: unknown;
  /** The run's live (not retired) steps, in position order (`loadRunHistory`). */
  readonly history: readonly HistoryStepRow[];
}

/** A turn that continues a kept {@link WorkflowInstance}. */
export interface ContinuedTurnInput extends TurnParams {
  /**
   * The run's live steps whose outcome no turn has delivered yet (`RunHistoryNews.fresh`); steps without an
   * outcome (and recorded values) may be included: they are skipped, as a full replay skips them.
   */
  readonly fresh: readonly HistoryStepRow[];
}

/**
 * The workflow code of one run, parked on the durable calls it awaits when its last turn blocked, kept by the
 * worker that ran that turn so that the next turn hands it only what is new ({@link WorkflowInstance.continueTurn})
 * instead of replaying from the top. A continued turn produces exactly the {@link TurnResult} a full replay over
 * the same history would (same positions, delivery order, new steps); the caller must make sure the history is
 * the one this instance left behind plus new outcomes (see {@link WorkflowInstance.expected}), else replay in full.
 * Dropping an instance needs no clean-up: its code waits on promises only it could settle, and it holds no timer,
 * listener or tracking between turns.
 */
export interface WorkflowInstance {
  /**
   * What the run's history holds if nothing but this instance's own committed turns and new outcomes of its steps
   * changed it: the number of live steps and the highest `delivered_seq`.
   */
  readonly expected: { readonly liveSteps: number; readonly maxDeliveredSeq: number };
  /**
   * Whether a later turn may continue this instance: its last turn blocked, and its code has not run outside a
   * turn (a promise that is not a durable call settled between turns: a full replay would not see that).
   */
  readonly continuable: boolean;
  /** Whether the code awaits the outcome of the step at position `seq` (an activity or timer it called, unsettled). */
  awaits(seq: number): boolean;
  /**
   * Run the next turn from where the last one blocked: deliver `turn.fresh` (the same order and cancel rules as a
   * full replay), then schedule, block or end as {@link runTurn} does. One turn at a time; legal only after the
   * previous turn's result was committed.
   * @returns the turn's result, or undefined (nothing run) when the instance is not {@link continuable}.
   */
  continueTurn(turn: ContinuedTurnInput): Promise<TurnResult | undefined>;
}

interface Deferred {
  readonly kind: string;
  readonly name: string;
  /** What the await resolves with, from the stored outcome (a signal wait's `{ signalId, payload }` or timeout). */
  readonly map?: (stored: unknown) => unknown;
  /** A signal wait's check of a pending signal: undefined when its payload fits the schema, else why not. */
  readonly refuses?: (signal: PendingSignal) => string | undefined;
  settled: boolean;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

/** What a turn may hand the code, in the order it happened: a step's outcome, or a pending signal. */
type Fresh =
  | { readonly step: HistoryStepRow; readonly at: number }
  | { readonly signal: PendingSignal; readonly at: number };

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
    concurrency: concurrencyLimitSchema.optional(),
    rateLimit: rateLimitSchema.optional(),
  })
  .strict();

/** The options of `ctx.runChild`. */
const runChildOptionsSchema = z
  .object({
    key: z
      .string()
      .min(1)
      .max(512)
      .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)')
      .optional(),
    queue: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1–128 letters, digits, _ . : -')
      .optional(),
    cancellation: z.enum(['cascade', 'abandon']).optional(),
  })
  .strict();

/** A child step's stored failure: what the parent's commit wrote when the child ended (see commitTurn). */
interface ChildStepFailure {
  readonly childRunId?: string;
  readonly cause?: SerializedFailure;
}

/** Longest a turn holds the event loop between two drains before letting it turn (ms). */
const REPLAY_SLICE_MS = 20;

/** Settle `d` with its stored outcome mapped ({@link Deferred.map}): resolved, or rejected with what the map threw. */
function settleMapped(d: Deferred, stored: unknown): void {
  let value: unknown;
  try {
    value = d.map ? d.map(stored) : stored;
  } catch (error) {
    d.reject(error);
    return;
  }
  d.resolve(value);
}

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
 * - recorded outcomes are delivered one at a time, draining the workflow's microtasks in between (without an
 *   event-loop turn unless the code uses `process.nextTick` or `queueMicrotask`: see `settleMicrotasks`), in the
 *   order earlier turns delivered them (`delivered_seq`), then new outcomes in the order they happened; so
 *   `Promise.race` and friends see the same winner on every replay;
 * - a call with no recorded step schedules a new one; the turn ends when the code blocks on pending steps;
 * - a cancel request the code has not seen through a cancelled step reaches it at the steps it is blocked on
 *   that this turn scheduled: they are recorded cancelled and their awaits reject with CancelledFailure.
 */
export async function runTurn(turn: TurnInput): Promise<TurnResult> {
  return (await startTurn(turn)).result;
}

/**
 * {@link runTurn}, and the workflow instance it leaves behind: when the turn blocked, its code is parked on the
 * durable calls it awaits, and a later turn of the same run may continue it ({@link WorkflowInstance}).
 */
export async function startTurn(
  turn: TurnInput,
): Promise<{ result: TurnResult; instance: WorkflowInstance }> {
  const instance = new Replay(turn.workflow, turn.info.runId, turn.history);
  const result = await instance.firstTurn(turn);
  return { result, instance };
}

/**
 * The workflow's clock (whole epoch ms) once `h`'s outcome reached the code, when it was `clockMs` before: the time
 * the outcome was recorded (`finished_ms`: an activity's or child's end, or the turn that fired a timer, handed a
 * signal or recorded a cancel), or, for an outcome this turn gives (not recorded yet), the turn's own time, which
 * its commit records as the step's `finished_at`. Never earlier than before: the clock only advances. Read only
 * from the history, so every replay of the run computes the same clock at every point of its code.
 */
export function workflowClockAfter(
  clockMs: number,
  h: HistoryStepRow | undefined,
  turnNowMs: number,
): number {
  return Math.max(clockMs, Math.floor(h?.finished_ms ?? turnNowMs));
}

/** A step of the run as the instance knows it: recorded before its first turn, or added by one of its turns. */
interface KnownStep {
  readonly kind: string;
  readonly name: string;
  /** A recorded value's output (`ctx.now()`, `ctx.random()`, `ctx.uuid()`). */
  readonly output: unknown;
}

/** Whether a recorded step has an outcome to hand to the code by `nowMs`, and which way it settles the await. */
function outcomeOf(h: HistoryStepRow, nowMs: number): 'resolve' | 'reject' | undefined {
  if (h.kind === 'timer' || h.kind === 'signal') {
    if (h.status === 'completed') return 'resolve';
    if (h.status === 'cancelled') return 'reject';
    if (h.status === 'scheduled' && h.due_ms !== null && h.due_ms <= nowMs) return 'resolve';
    return undefined;
  }
  if ((h.kind === 'activity' || h.kind === 'child') && TERMINAL.has(h.status))
    return h.status === 'completed' ? 'resolve' : 'reject';
  return undefined;
}

/**
 * One run's workflow code and everything replay knows about it, kept across the turns of a {@link WorkflowInstance}.
 * State that belongs to the turn in progress (its parameters, new steps, deliveries, whether it is open) is reset
 * by each turn; the rest (positions, the awaits the code made, the delivery order) carries over, exactly as a
 * full replay would rebuild it.
 */
class Replay implements WorkflowInstance {
  private readonly known: Map<number, KnownStep>;
  private readonly requested = new Map<number, Deferred>();
  private position = 0;
  /**
   * The workflow's clock (whole epoch ms): what `Date.now()` and `new Date()` read in its code. The run's start
   * until an outcome reaches the code, then the time of the last outcome delivered ({@link workflowClockAfter}).
   */
  private clockMs: number | undefined;
  /** What `Math.random()` returns in the code: seeded from the run's id, drawn in the code's own order. */
  private readonly random: () => number;
  /** The highest delivery order handed to the code so far (recorded or new); 0 before the first. */
  private seenDeliveredSeq = 0;
  private nextDeliveredSeq = 1;
  private fatal: PalisadeError | undefined;
  /** The code was handed a CancelledFailure (a cancelled step's outcome). */
  private cancelSeen = false;
  private settled: { ok: true; value: unknown } | { ok: false; error: unknown } | undefined;
  /** The code ran while no turn was open: continuing it could differ from a full replay. */
  private tainted = false;
  private lastOutcome: TurnOutcome['kind'] | undefined;
  // The turn in progress.
  private turn: TurnParams | undefined;
  private newSteps: NewStep[] = [];
  private deliveries: Delivery[] = [];
  private rejectedSignals: RejectedSignal[] = [];
  private progress: { value: unknown } | undefined;
  private closed = true;
  private nonDurable: string | undefined;
  private busy = false;
  private readonly workflowName: string;
  private readonly ctx: WorkflowContext;
  /**
   * Where the non-durable tracking of the code reports. Continuations of the code run in the async context it
   * awaited in (this sink, set by its first turn), so the sink forwards to whichever turn is open.
   */
  private readonly sink: NonDurableSink = {
    reportNonDurable: (type) => {
      if (this.closed) this.tainted = true;
      else this.nonDurable ??= type;
    },
    clockMs: () => this.clockMs ?? Math.floor(this.current.nowMs),
    random: () => this.random(),
    reportOtherQueue: () => {
      this.usesOtherQueues = true;
    },
  };
  /** The code has used `process.nextTick` or `queueMicrotask`: its drains also take an event-loop turn. */
  private usesOtherQueues = false;

  /**
   * Let the code run until it blocks again (after its start, a delivered outcome, a rejected await): the microtask
   * queue drained of its work ({@link settleMicrotasks}), and when the code queues work elsewhere, an event-loop
   * turn. n outcomes are delivered in n drains, not n event-loop turns; a replay that has held the event loop for
   * {@link REPLAY_SLICE_MS} lets it turn once (the code is blocked then, as after any drain), so timers and replies
   * of the rest of the worker (heartbeats) are not held up by a long history.
   */
  private async drain(): Promise<void> {
    await settleMicrotasks();
    if (this.usesOtherQueues || performance.now() - this.sliceStartedAt >= REPLAY_SLICE_MS) {
      await macrotask();
      this.sliceStartedAt = performance.now();
    }
  }

  /** When the code last let the event loop turn (see {@link REPLAY_SLICE_MS}). */
  private sliceStartedAt = 0;

  constructor(
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    private readonly workflow: WorkflowDefinition<any, any>,
    private readonly runId: string,
    history: readonly HistoryStepRow[],
  ) {
    this.workflowName = workflow.name;
    this.random = seededRandom(runId);
    // Only recorded values are read back (ctx.now/random/uuid); an activity's output is not kept in a parked instance.
    this.known = new Map(
      history.map((h) => [
        h.seq,
        { kind: h.kind, name: h.name, output: h.kind === 'value' ? h.output : null },
      ]),
    );
    this.ctx = this.makeContext();
  }

  get expected(): WorkflowInstance['expected'] {
    return { liveSteps: this.known.size, maxDeliveredSeq: this.nextDeliveredSeq - 1 };
  }

  awaits(seq: number): boolean {
    return this.requested.get(seq)?.settled === false;
  }

  get continuable(): boolean {
    return (
      this.lastOutcome === 'blocked' &&
      !this.tainted &&
      !this.busy &&
      !this.fatal &&
      !this.nonDurable &&
      !this.settled
    );
  }

  /** The first turn: start the code, hand it the recorded outcomes in their recorded order, then what is new. */
  async firstTurn(turn: TurnInput): Promise<TurnResult> {
    this.open(turn);
    this.clockMs = Math.floor(turn.startedMs ?? turn.nowMs);
    // Start the workflow code; it runs until it blocks on durable calls.
    const tracking = trackNonDurable(this.sink, () => {
      Promise.resolve()
        .then(() =>
          this.workflow.run(
            validate(this.workflow.input, turn.input, `input of workflow ${this.workflowName}`),
            this.ctx,
          ),
        )
        .then(
          (v: unknown) => this.settle({ ok: true, value: v }),
          (e: unknown) => this.settle({ ok: false, error: e }),
        );
    });
    try {
      await this.drain();
      // Deliver recorded outcomes: first in the order earlier turns delivered them, then new ones as they happened.
      const delivered = turn.history
        .filter((h) => h.delivered_seq !== null)
        .sort((a, b) => (a.delivered_seq as number) - (b.delivered_seq as number));
      this.nextDeliveredSeq = delivered.reduce((m, h) => Math.max(m, h.delivered_seq as number), 0) + 1;
      for (const h of delivered) {
        if (this.settled || this.fatal || this.nonDurable) break;
        if (!this.requested.has(h.seq)) {
          this.fatal ??= new NonDeterminismError(
            this.workflowName,
            h.seq,
            `${h.kind} ${h.name} (delivered in an earlier turn)`,
            this.position > h.seq ? 'a call that did not await it' : 'no call at that position yet',
            this.runId,
          );
          break;
        }
        this.seenDeliveredSeq = h.delivered_seq as number;
        this.deliver(h);
        await this.drain();
      }
      await this.deliverFresh(turn.history);
    } finally {
      this.closed = true;
      tracking.end();
    }
    return this.finish();
  }

  async continueTurn(turn: ContinuedTurnInput): Promise<TurnResult | undefined> {
    if (!this.continuable) return undefined;
    this.open(turn);
    // The tracking is on only while a turn runs (it slows every promise of the process); the code's
    // continuations report to this instance's sink, captured by the first turn.
    const tracking = trackNonDurable(this.sink, () => undefined);
    try {
      await this.deliverFresh(turn.fresh);
    } finally {
      this.closed = true;
      tracking.end();
    }
    return this.finish();
  }

  private open(turn: TurnParams): void {
    this.busy = true;
    this.sliceStartedAt = performance.now();
    // The turn's parameters only: a full replay's `TurnInput` also carries the whole history and the input, which
    // a parked instance must not keep alive.
    this.turn = {
      info: turn.info,
      priority: turn.priority,
      nowMs: turn.nowMs,
      cancelRequested: turn.cancelRequested,
      signals: turn.signals ?? [],
    };
    this.newSteps = [];
    this.deliveries = [];
    this.rejectedSignals = [];
    this.progress = undefined;
    this.nonDurable = undefined;
    this.closed = false;
  }

  private settle(outcome: { ok: true; value: unknown } | { ok: false; error: unknown }): void {
    if (this.closed) this.tainted = true;
    this.settled = outcome;
  }

  private get current(): TurnParams {
    return this.turn as TurnParams;
  }

  private running(): boolean {
    return !this.settled && !this.fatal && !this.nonDurable;
  }

  private nondeterminism(seq: number, recorded: KnownStep, kind: string, name: string): void {
    this.fatal ??= new NonDeterminismError(
      this.workflowName,
      seq,
      `${recorded.kind} ${recorded.name}`,
      `${kind} ${name}`,
      this.runId,
    );
  }

  /** Claim the next position for a durable call; returns the recorded step, if any (after checking it). */
  private take(kind: string, name: string): { seq: number; recorded?: KnownStep; ok: boolean } {
    const seq = this.position++;
    const recorded = this.known.get(seq);
    if (recorded && (recorded.kind !== kind || recorded.name !== name)) {
      this.nondeterminism(seq, recorded, kind, name);
      return { seq, ok: false };
    }
    return recorded ? { seq, recorded, ok: true } : { seq, ok: true };
  }

  private durable<T>(
    kind: 'activity' | 'timer' | 'signal' | 'child',
    name: string,
    schedule: (seq: number) => StepCall,
    map?: (stored: unknown) => unknown,
    refuses?: (signal: PendingSignal) => string | undefined,
  ): Promise<T> {
    if (this.closed) this.tainted = true;
    if (this.closed || this.fatal) return never<T>();
    const { seq, recorded, ok } = this.take(kind, name);
    if (!ok) return never<T>();
    if (!recorded) this.newSteps.push({ ...schedule(seq), afterDeliveredSeq: this.seenDeliveredSeq });
    const promise = new Promise<T>((resolve, reject) => {
      this.requested.set(seq, {
        kind,
        name,
        ...(map ? { map } : {}),
        ...(refuses ? { refuses } : {}),
        settled: false,
        resolve: (v) => resolve(v as T),
        reject,
      });
    });
    // A step may fail before the code awaits it (it awaits another step first, then this one in a try): marked
    // handled here, so that Node does not take it for an unhandled rejection and end the worker's process. The
    // code's own await still gets the failure; a failure the code never awaits is ignored, as in Temporal.
    promise.catch(() => undefined);
    return promise;
  }

  private value<T>(name: string, make: () => T): T {
    if (this.closed) this.tainted = true;
    if (this.closed || this.fatal) return make();
    const { seq, recorded, ok } = this.take('value', name);
    if (recorded && ok) return recorded.output as T;
    const fresh = make();
    if (ok) {
      this.newSteps.push({
        seq,
        kind: 'value',
        name,
        output: fresh,
        afterDeliveredSeq: this.seenDeliveredSeq,
      });
    }
    return fresh;
  }

  /**
   * `ctx.patched` / `ctx.deprecatePatch`: a patch is a recorded value `patch:<id>` at the position where the code
   * asks. A recorded step there that is not that marker is history the old code made: the old branch, and no
   * position is taken. Nothing recorded there: the code runs past its history, so the new branch; `patched`
   * records the marker, `deprecatePatch` nothing.
   */
  private patch(changeId: string, call: 'patched' | 'deprecatePatch'): boolean {
    if (typeof changeId !== 'string' || !/^[A-Za-z0-9_.:-]{1,128}$/.test(changeId)) {
      throw new InvalidOptionsError(`ctx.${call} in workflow ${this.workflowName}`, [
        { path: 'changeId', message: 'must be 1–128 characters of letters, digits, and _ . : -' },
      ]);
    }
    if (this.closed) this.tainted = true;
    if (this.closed || this.fatal) return true;
    const name = `patch:${changeId}`;
    const recorded = this.known.get(this.position);
    if (recorded) {
      if (recorded.kind !== 'value' || recorded.name !== name) return false;
      this.position++;
      return true;
    }
    if (call === 'deprecatePatch') return true;
    const seq = this.position++;
    this.newSteps.push({ seq, kind: 'value', name, output: true, afterDeliveredSeq: this.seenDeliveredSeq });
    return true;
  }

  private makeContext(): WorkflowContext {
    const workflowName = this.workflowName;
    const runId = this.runId;
    // eslint-disable-next-line @typescript-eslint/no-this-alias
    const replay = this;
    return {
      // The turn in progress's info (a kept instance's code sees each turn's own turnAttempt, as on replay).
      get info() {
        return replay.current.info;
      },
      run: <O>(activity: ActivityDefinition, input: unknown, options: RunActivityOptions = {}) => {
        if (!activity || activity.kind !== 'activity') {
          this.fatal ??= new PalisadeError(
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
          return JSON.parse(checkPayload(checked, what, PAYLOAD_LIMITS.inputBytes, { runId }));
        };
        return this.durable<O>('activity', activity.name, (seq) => ({
          seq,
          kind: 'activity',
          name: activity.name,
          input: inputOf(seq),
          queue: options.queue ?? activity.queue,
          priority: options.priority ?? this.current.priority,
          retryPolicy: mergeRetryPolicy(activity.retry, options.retry, `retry of ${activity.name}`),
          leaseMs: overrideLease(activity, options.leaseMs),
          startToCloseTimeoutMs:
            options.startToCloseTimeoutMs !== undefined
              ? toMs(options.startToCloseTimeoutMs, `startToCloseTimeoutMs of ctx.run(${activity.name})`)
              : activity.startToCloseTimeoutMs,
          concurrency: parsedOptions.data.concurrency,
          rateLimit: parsedOptions.data.rateLimit ?? activity.rateLimit,
        }));
      },
      runChild: <O>(workflow: WorkflowDefinition, input: unknown, options: RunChildOptions = {}) => {
        if (!workflow || (workflow as { kind?: unknown }).kind !== 'workflow') {
          throw new InvalidOptionsError(`ctx.runChild in workflow ${workflowName}`, [
            { path: 'workflow', message: 'must be a workflow from defineWorkflow()' },
          ]);
        }
        const where = `ctx.runChild(${workflow.name}) in workflow ${workflowName}`;
        const parsedOptions = runChildOptionsSchema.safeParse(options);
        if (!parsedOptions.success)
          throw new InvalidOptionsError(where, formatIssues(parsedOptions.error.issues));
        const inputOf = (seq: number): unknown => {
          const what = `input of child workflow ${workflow.name} (step ${seq} of ${workflowName})`;
          const checked: unknown = validate(workflow.input, input, what);
          return JSON.parse(checkPayload(checked, what, PAYLOAD_LIMITS.inputBytes, { runId }));
        };
        // The child's output is checked against its schema as the parent takes it, as an activity's is.
        const map = (stored: unknown): unknown =>
          validate(workflow.output, stored, `output of child workflow ${workflow.name} in ${workflowName}`, {
            runId,
          });
        return this.durable<O>(
          'child',
          workflow.name,
          (seq) => ({
            seq,
            kind: 'child',
            name: workflow.name,
            childRunId: randomUUID(),
            input: inputOf(seq),
            key: parsedOptions.data.key ?? null,
            queue: parsedOptions.data.queue ?? workflow.queue,
            priority: this.current.priority,
            cancellation: parsedOptions.data.cancellation ?? 'cascade',
          }),
          map,
        );
      },
      sleep: (duration: Duration) => {
        const delayMs = toMs(duration, `ctx.sleep duration in workflow ${workflowName}`, MAX_SLEEP_MS);
        return this.durable<void>('timer', 'sleep', (seq) => ({
          seq,
          kind: 'timer',
          name: 'sleep',
          delayMs,
        }));
      },
      sleepUntil: (date: Date) => {
        const dueAtMs = date instanceof Date ? date.getTime() : Number.NaN;
        if (Number.isFinite(dueAtMs) && instantProblem(dueAtMs) !== undefined) {
          throw new InvalidOptionsError(`ctx.sleepUntil in workflow ${workflowName}`, [
            { path: 'date', message: instantProblem(dueAtMs) as string },
          ]);
        }
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
        return this.durable<void>('timer', 'sleep', (seq) => ({
          seq,
          kind: 'timer',
          name: 'sleep',
          dueAtMs,
        }));
      },
      waitForSignal: (signal: SignalDefinition, options?: { timeout?: Duration }) => {
        if (!signal || (signal as { kind?: unknown }).kind !== 'signal') {
          throw new InvalidOptionsError(`ctx.waitForSignal in workflow ${workflowName}`, [
            { path: 'signal', message: 'must be a signal from defineSignal()' },
          ]);
        }
        const where = `ctx.waitForSignal(${signal.name}) in workflow ${workflowName}`;
        if (options !== undefined && (typeof options !== 'object' || options === null)) {
          throw new InvalidOptionsError(where, [{ path: 'options', message: 'must be { timeout }' }]);
        }
        const extra = Object.keys(options ?? {}).filter((k) => k !== 'timeout');
        if (extra.length > 0) {
          throw new InvalidOptionsError(where, [
            { path: extra[0] as string, message: 'is not an option (only timeout)' },
          ]);
        }
        const withTimeout = options?.timeout !== undefined;
        const timeoutMs = withTimeout
          ? toMs(options.timeout as Duration, `timeout of ${where}`, MAX_SLEEP_MS)
          : undefined;
        // A pending signal is checked against the schema of the code that waits for it before the wait takes it
        // (one sent from the CLI, or by a sender with another version of the schema, was not): a payload the
        // schema refuses is recorded undelivered, with the schema's message, and the wait goes on waiting — a
        // mistyped signal never costs the run. The turn decides once; its commit records it, so no replay sees it.
        const refuses = (pending: PendingSignal): string | undefined => {
          const parsed = signal.payload.safeParse(pending.payload);
          if (parsed.success) return undefined;
          const issues = formatIssues(parsed.error.issues).map((i) => `${i.path || '(root)'}: ${i.message}`);
          return `payload of signal ${signal.name} #${pending.id} does not fit ${where}: ${issues.join('; ')}`;
        };
        // The stored outcome: `{ signalId, payload }`, or `{ timedOut: true }` when the timeout passed first. The
        // payload was checked when the wait took it; a wait recorded with a payload its schema refuses (taken
        // before that check, or by code whose schema has changed since) rejects the await with ValidationError.
        const map = (stored: unknown): unknown => {
          const o = (stored ?? {}) as { timedOut?: boolean; signalId?: string; payload?: unknown };
          if (withTimeout && o.timedOut === true) return { timedOut: true };
          const payload: unknown = validate(
            signal.payload,
            o.payload,
            `payload of signal ${signal.name} #${String(o.signalId)} taken by ${where}`,
            { runId },
          );
          return withTimeout ? { timedOut: false, payload } : payload;
        };
        return this.durable(
          'signal',
          signal.name,
          (seq) => ({
            seq,
            kind: 'signal',
            name: signal.name,
            ...(timeoutMs !== undefined ? { timeoutMs } : {}),
          }),
          map,
          refuses,
        );
      },
      setProgress: (value: unknown) => {
        if (this.closed) this.tainted = true;
        if (this.closed || this.fatal) return;
        const what = `progress of workflow ${workflowName}`;
        this.progress = {
          value: JSON.parse(checkPayload(value, what, PAYLOAD_LIMITS.progressBytes, { runId })) as unknown,
        };
      },
      patched: (changeId: string) => this.patch(changeId, 'patched'),
      deprecatePatch: (changeId: string) => void this.patch(changeId, 'deprecatePatch'),
      // Whole ms, as a Date holds them: the recorded value is exactly what the code saw (the DB clock has µs).
      now: () => new Date(this.value('now', () => Math.floor(this.current.nowMs))),
      random: () => this.value('random', () => originalRandom()),
      uuid: () => this.value('uuid', () => randomUUID()),
    };
  }

  private deliver(h: HistoryStepRow): void {
    const d = this.requested.get(h.seq);
    if (!d || d.settled) return;
    d.settled = true;
    this.advanceClock(h);
    if (outcomeOf(h, this.current.nowMs) === 'resolve') {
      if (h.kind === 'timer') d.resolve(undefined);
      // A signal wait that is still scheduled here is one this turn sees time out.
      else if (h.kind === 'signal') settleMapped(d, h.status === 'scheduled' ? { timedOut: true } : h.output);
      else if (h.kind === 'child') settleMapped(d, h.output);
      else d.resolve(h.output);
    } else if (h.status === 'cancelled') {
      this.cancelSeen = true;
      d.reject(
        new CancelledFailure(`step ${h.name}#${h.seq} was cancelled`, { runId: this.runId, stepId: h.id }),
      );
    } else if (h.kind === 'child') {
      const stored = (h.error ?? {}) as ChildStepFailure & SerializedFailure;
      d.reject(
        new ChildWorkflowFailure(h.name, stored.childRunId, stored.cause ?? stored, {
          runId: this.runId,
          stepId: h.id,
        }),
      );
    } else
      d.reject(
        new ActivityFailure(h.name, h.error as SerializedFailure, { runId: this.runId, stepId: h.id }),
      );
  }

  /**
   * Hand the code the outcomes no turn delivered yet, in the order they happened, one at a time; then, blocked,
   * deliver a cancel request it has not seen to the steps this turn scheduled.
   */
  private async deliverFresh(steps: readonly HistoryStepRow[]): Promise<void> {
    const nowMs = this.current.nowMs;
    // Signal waits whose outcome is recorded already (ended, or undelivered after a retry): no signal goes to them.
    const ended = new Set(
      steps.filter((h) => h.kind === 'signal' && h.status !== 'scheduled').map((h) => h.seq),
    );
    // Outcomes and pending signals together, in the order they happened: a signal that came before a wait's
    // timeout is taken by the wait, one that came after it is left for a later wait.
    const remaining: Fresh[] = [
      ...steps
        .filter((h) => h.delivered_seq === null && h.kind !== 'value' && outcomeOf(h, nowMs))
        .map((step) => ({ step, at: step.finished_ms ?? step.due_ms ?? 0 })),
      ...(this.current.signals ?? []).map((signal) => ({ signal, at: signal.received_ms })),
    ].sort(
      (a, b) =>
        a.at - b.at ||
        ('step' in a ? a.step.seq : Number.MAX_SAFE_INTEGER) -
          ('step' in b ? b.step.seq : Number.MAX_SAFE_INTEGER) ||
        ('signal' in a ? Number(a.signal.id) : 0) - ('signal' in b ? Number(b.signal.id) : 0),
    );
    while (this.running()) {
      const index = remaining.findIndex((f) =>
        'step' in f ? this.requested.has(f.step.seq) : this.waitFor(f.signal.name, ended) !== undefined,
      );
      if (index >= 0) {
        const [f] = remaining.splice(index, 1) as [Fresh];
        if ('signal' in f) {
          const seq = this.waitFor(f.signal.name, ended) as number;
          const refused = this.requested.get(seq)?.refuses?.(f.signal);
          if (refused !== undefined) {
            // Not delivered: nothing reached the code, so nothing to drain; the wait takes the next one, if any.
            this.rejectedSignals.push({ signalId: f.signal.id, seq, message: refused });
            continue;
          }
          this.handSignal(f.signal, seq);
        } else {
          const h = f.step;
          // A wait that took a signal earlier in this turn: its timeout no longer counts.
          if (this.requested.get(h.seq)?.settled) continue;
          this.seenDeliveredSeq = this.nextDeliveredSeq;
          this.deliver(h);
          this.deliveries.push({
            stepId: h.id,
            seq: h.seq,
            deliveredSeq: this.nextDeliveredSeq++,
            firesTimer: (h.kind === 'timer' || h.kind === 'signal') && h.status === 'scheduled',
          });
        }
        await this.drain();
        continue;
      }
      // Blocked. A cancel requested before any step it could end existed (before the first turn, or while a
      // turn that did not know of it was scheduling) has not reached the code: the steps this turn scheduled and
      // the code is blocked on are recorded cancelled, as the request would have ended them, and their awaits
      // reject one at a time in position order (recorded by delivered_seq, so replay repeats it). What the code
      // schedules after seeing the cancel (compensation in catch/finally) runs normally.
      if (!this.current.cancelRequested || this.cancelSeen) break;
      const blockedOn = this.newSteps.filter(
        (s) => s.kind !== 'value' && this.requested.get(s.seq)?.settled === false,
      );
      if (blockedOn.length === 0) break;
      for (const s of blockedOn) {
        if (!this.running()) break;
        const d = this.requested.get(s.seq) as Deferred;
        d.settled = true;
        this.cancelSeen = true;
        this.advanceClock();
        this.seenDeliveredSeq = this.nextDeliveredSeq;
        this.newSteps[this.newSteps.indexOf(s)] = {
          ...s,
          cancelled: true,
          deliveredSeq: this.nextDeliveredSeq++,
        } as NewStep;
        d.reject(new CancelledFailure(`step ${s.name}#${s.seq} was cancelled`, { runId: this.runId }));
        await this.drain();
      }
    }
  }

  /**
   * The signal wait a pending signal named `name` goes to: the code's earliest unsettled wait for it with no
   * recorded outcome (`ended`), or undefined.
   */
  private waitFor(name: string, ended: ReadonlySet<number>): number | undefined {
    let found: number | undefined;
    for (const [seq, d] of this.requested) {
      if (
        d.kind === 'signal' &&
        d.name === name &&
        !d.settled &&
        !ended.has(seq) &&
        (found ?? seq + 1) > seq
      ) {
        found = seq;
      }
    }
    return found;
  }

  /**
   * Hand pending signal `signal` to the wait at `seq`, as its outcome, in delivery order: a wait this turn made is
   * recorded completed with it, one recorded earlier is completed by the commit (by position: a kept instance
   * does not know the ids of the steps its turns recorded).
   */
  private handSignal(signal: PendingSignal, seq: number): void {
    const d = this.requested.get(seq) as Deferred;
    d.settled = true;
    this.advanceClock();
    this.seenDeliveredSeq = this.nextDeliveredSeq;
    const deliveredSeq = this.nextDeliveredSeq++;
    const made = this.newSteps.findIndex((s) => s.seq === seq);
    if (made >= 0) {
      this.newSteps[made] = { ...this.newSteps[made], signalId: signal.id, deliveredSeq } as NewStep;
    } else {
      this.deliveries.push({ stepId: null, seq, deliveredSeq, firesTimer: false, signalId: signal.id });
    }
    settleMapped(d, { signalId: signal.id, payload: signal.payload });
  }

  /** The code's clock once `h`'s outcome (or, without `h`, an outcome this turn gives) reaches it. */
  private advanceClock(h?: HistoryStepRow): void {
    this.clockMs = workflowClockAfter(this.clockMs ?? Math.floor(this.current.nowMs), h, this.current.nowMs);
  }

  /** The turn's result; a blocked turn's new steps become known steps for the next one. */
  private finish(): TurnResult {
    const result = this.outcome();
    this.lastOutcome = result.outcome.kind;
    if (result.outcome.kind === 'blocked') {
      for (const s of result.newSteps) {
        this.known.set(s.seq, { kind: s.kind, name: s.name, output: s.kind === 'value' ? s.output : null });
      }
    }
    this.busy = false;
    const withRejected =
      this.rejectedSignals.length > 0 ? { ...result, rejectedSignals: this.rejectedSignals } : result;
    return this.progress && result.outcome.kind !== 'failed'
      ? { ...withRejected, progress: this.progress }
      : withRejected;
  }

  private outcome(): TurnResult {
    const { newSteps, deliveries, workflowName, runId } = this;
    // Code that ends before reaching a recorded step no longer accounts for its history (the step was removed,
    // or moved after the return): stop the run rather than complete it over work the code does not know of.
    if (this.settled && !this.nonDurable) {
      let unreached: [number, KnownStep] | undefined;
      for (const entry of this.known) {
        if (entry[0] >= this.position && (!unreached || entry[0] < unreached[0])) unreached = entry;
      }
      if (unreached) {
        this.fatal ??= new NonDeterminismError(
          workflowName,
          unreached[0],
          `${unreached[1].kind} ${unreached[1].name}`,
          'no call (the workflow ended first)',
          runId,
        );
      }
    }

    if (this.fatal)
      return {
        newSteps: [],
        deliveries: [],
        outcome: { kind: 'failed', error: serializeFailure(this.fatal) },
      };
    if (this.nonDurable) {
      const error = new PalisadeError(
        'NON_DURABLE_AWAIT',
        `workflow ${workflowName} started a ${this.nonDurable} (a timer or I/O) inside workflow code; workflow code ` +
          'may only await ctx.run, ctx.sleep, ctx.sleepUntil and ctx.waitForSignal — move the work into an activity',
        { runId },
      );
      return { newSteps: [], deliveries: [], outcome: { kind: 'failed', error: serializeFailure(error) } };
    }
    const done = this.settled;
    if (!done) {
      const pending =
        [...this.requested.values()].filter((d) => !d.settled).length +
        newSteps.filter(
          (s) => s.kind !== 'value' && !s.cancelled && !(s.kind === 'signal' && s.signalId !== undefined),
        ).length;
      if (pending === 0) {
        const error = new PalisadeError(
          'NON_DURABLE_AWAIT',
          `workflow ${workflowName} is waiting on a promise that is not a durable primitive (no step is pending); ` +
            'workflow code may only await ctx.run, ctx.sleep, ctx.sleepUntil and ctx.waitForSignal',
          { runId },
        );
        return { newSteps: [], deliveries: [], outcome: { kind: 'failed', error: serializeFailure(error) } };
      }
      return { newSteps, deliveries, outcome: { kind: 'blocked' } };
    }
    if (done.ok) {
      try {
        const what = `output of workflow ${workflowName}`;
        const output: unknown = validate(this.workflow.output, done.value, what, { runId });
        // An output the database cannot store (or that would not come back from result() as it is) fails the run
        // here, recorded, rather than a commit that fails and replays the turn forever.
        checkPayload(output, what, PAYLOAD_LIMITS.outputBytes, { runId });
        return { newSteps, deliveries, outcome: { kind: 'completed', output } };
      } catch (error) {
        return { newSteps, deliveries, outcome: { kind: 'failed', error: serializeFailure(error) } };
      }
    }
    const error = serializeFailure(done.error);
    const cancelled =
      this.current.cancelRequested && (done.error as { code?: unknown } | undefined)?.code === 'CANCELLED';
    return {
      newSteps,
      deliveries,
      outcome: cancelled ? { kind: 'cancelled', error } : { kind: 'failed', error },
    };
  }
}
