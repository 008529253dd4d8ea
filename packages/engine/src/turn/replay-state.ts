/**
 * What replay knows about one run's workflow code, kept across the turns of a workflow instance, and the
 * primitives every durable call goes through: taking the next position (checked against the history), recording
 * a new step or value, the code's clock, and the drain between deliveries. The `ctx` methods (`context/`), the
 * delivery of outcomes (`delivery/`) and the end of a turn (`turn-end.ts`) all work on this state.
 */
import { NonDeterminismError, type PalisadeError, type WorkflowDefinition } from '@palisade/sdk';
import type {
  Delivery,
  HistoryStepRow,
  NewStep,
  PendingSignal,
  RejectedSignal,
  StepCall,
  TurnOutcome,
  TurnParams,
} from './contract.js';
import type { TurnHost, TurnSink } from './host.js';
import { seededRandom } from './seeded-random.js';
import { workflowClockAfter } from './workflow-clock.js';

/** An await the code made on a durable call, until an outcome settles it. */
export interface Deferred {
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

/** A step of the run as the instance knows it: recorded before its first turn, or added by one of its turns. */
export interface KnownStep {
  readonly kind: string;
  readonly name: string;
  /** A recorded value's output (`ctx.now()`, `ctx.random()`, `ctx.uuid()`). */
  readonly output: unknown;
}

/** How the workflow code's `run` settled: its return value, or what it threw. */
export type CodeSettled = { ok: true; value: unknown } | { ok: false; error: unknown };

/** Longest a turn holds the event loop between two drains before letting it turn (ms). */
const REPLAY_SLICE_MS = 20;

/** Settle `d` with its stored outcome mapped ({@link Deferred.map}): resolved, or rejected with what the map threw. */
export function settleMapped(d: Deferred, stored: unknown): void {
  let value: unknown;
  try {
    value = d.map ? d.map(stored) : stored;
  } catch (error) {
    d.reject(error);
    return;
  }
  d.resolve(value);
}

/** A promise that never settles: what a call returns that must not let the code go on (a refused call). */
export function never<T>(): Promise<T> {
  return new Promise<T>(() => undefined);
}

/**
 * One run's workflow code and everything replay knows about it. State that belongs to the turn in progress (its
 * parameters, new steps, deliveries, whether it is open) is reset by each turn ({@link open}); the rest
 * (positions, the awaits the code made, the delivery order) carries over, exactly as a full replay would rebuild
 * it. Internal to `turn/`: the worker sees only the `WorkflowInstance` around it.
 */
export class ReplayState {
  readonly known: Map<number, KnownStep>;
  readonly requested = new Map<number, Deferred>();
  /** The next position a durable call takes. */
  position = 0;
  /**
   * The workflow's clock (whole epoch ms): what `Date.now()` and `new Date()` read in its code. The run's start
   * until an outcome reaches the code, then the time of the last outcome delivered ({@link workflowClockAfter}).
   */
  clockMs: number | undefined;
  /** What `Math.random()` returns in the code: seeded from the run's id, drawn in the code's own order. */
  private readonly random: () => number;
  /** The highest delivery order handed to the code so far (recorded or new); 0 before the first. */
  seenDeliveredSeq = 0;
  nextDeliveredSeq = 1;
  fatal: PalisadeError | undefined;
  /** The code was handed a CancelledFailure (a cancelled step's outcome). */
  cancelSeen = false;
  settled: CodeSettled | undefined;
  /** The code ran while no turn was open: continuing it could differ from a full replay. */
  tainted = false;
  lastOutcome: TurnOutcome['kind'] | undefined;
  // The turn in progress.
  private turn: TurnParams | undefined;
  newSteps: NewStep[] = [];
  deliveries: Delivery[] = [];
  rejectedSignals: RejectedSignal[] = [];
  progress: { value: unknown } | undefined;
  closed = true;
  nonDurable: string | undefined;
  busy = false;
  readonly workflowName: string;
  /** The code has used `process.nextTick` or `queueMicrotask`: its drains also take an event-loop turn. */
  private usesOtherQueues = false;
  /** When the code last let the event loop turn (see {@link REPLAY_SLICE_MS}). */
  private sliceStartedAt = 0;
  /**
   * Where the host's tracking of the code reports. Continuations of the code run in the async context it
   * awaited in (this sink, set by its first turn), so the sink forwards to whichever turn is open.
   */
  readonly sink: TurnSink = {
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

  constructor(
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    readonly workflow: WorkflowDefinition<any, any>,
    readonly runId: string,
    history: readonly HistoryStepRow[],
    readonly host: TurnHost,
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
  }

  /** Open a turn: its parameters, and an empty result. */
  open(turn: TurnParams): void {
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

  /** The parameters of the turn in progress (or of the last one). */
  get current(): TurnParams {
    return this.turn as TurnParams;
  }

  /** The code may still go on in this turn: it has not ended, and nothing has stopped the run. */
  running(): boolean {
    return !this.settled && !this.fatal && !this.nonDurable;
  }

  /** The code's `run` settled (outside a turn: the instance can no longer be continued). */
  settle(outcome: CodeSettled): void {
    if (this.closed) this.tainted = true;
    this.settled = outcome;
  }

  /**
   * A call of the code while no turn is open taints the instance; such a call, and any after a fatal error, is
   * refused. @returns whether the call is refused.
   */
  refusesCall(): boolean {
    if (this.closed) this.tainted = true;
    return this.closed || this.fatal !== undefined;
  }

  /**
   * Let the code run until it blocks again (after its start, a delivered outcome, a rejected await): the microtask
   * queue drained of its work (`TurnHost.settleMicrotasks`), and when the code queues work elsewhere, an
   * event-loop turn. n outcomes are delivered in n drains, not n event-loop turns; a replay that has held the event
   * loop for {@link REPLAY_SLICE_MS} lets it turn once (the code is blocked then, as after any drain), so timers and
   * replies of the rest of the worker (heartbeats) are not held up by a long history.
   */
  async drain(): Promise<void> {
    await this.host.settleMicrotasks();
    if (this.usesOtherQueues || performance.now() - this.sliceStartedAt >= REPLAY_SLICE_MS) {
      await this.host.macrotask();
      this.sliceStartedAt = performance.now();
    }
  }

  /** The code's clock once `h`'s outcome (or, without `h`, an outcome this turn gives) reaches it. */
  advanceClock(h?: HistoryStepRow): void {
    this.clockMs = workflowClockAfter(this.clockMs ?? Math.floor(this.current.nowMs), h, this.current.nowMs);
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
  take(kind: string, name: string): { seq: number; recorded?: KnownStep; ok: boolean } {
    const seq = this.position++;
    const recorded = this.known.get(seq);
    if (recorded && (recorded.kind !== kind || recorded.name !== name)) {
      this.nondeterminism(seq, recorded, kind, name);
      return { seq, ok: false };
    }
    return recorded ? { seq, recorded, ok: true } : { seq, ok: true };
  }

  /**
   * A durable call (an activity, timer, signal wait or child run): takes the next position, schedules the step
   * (`schedule`) unless it is recorded, and returns the await the outcome settles (mapped by `map`).
   */
  durable<T>(
    kind: 'activity' | 'timer' | 'signal' | 'child',
    name: string,
    schedule: (seq: number) => StepCall,
    map?: (stored: unknown) => unknown,
    refuses?: (signal: PendingSignal) => string | undefined,
  ): Promise<T> {
    if (this.refusesCall()) return never<T>();
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

  /** A recorded value (`ctx.now()`, `ctx.random()`, `ctx.uuid()`): the recorded one, or `make()` recorded now. */
  value<T>(name: string, make: () => T): T {
    if (this.refusesCall()) return make();
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
}
