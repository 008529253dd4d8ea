import {
  AttemptAbortedError,
  LeaseLostError,
  PalisadeError,
  serializeFailure,
  type AbortReason,
  type ActivityContext,
  type ActivityDefinition,
  type FencedTransaction,
} from '@palisade/sdk';
import { validate } from '@palisade/sdk/internal';
import type { ActivityTiming } from '../options.js';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';
import { recordAbortOutcome } from './abort-outcome.js';
import { createActivityContext, storableHeartbeatDetails } from './activity-context.js';
import { AttemptDeadline, type PassedDeadline } from './attempt-deadline.js';
import { AttemptOutcomes, type ReleaseWhy } from './attempt-outcome.js';
import type { AttemptServices } from './attempt-services.js';
import { assertUsableOutsideTransaction } from '../db/fenced-scope.js';
import { runFencedTransaction } from './fenced-transaction.js';
import { HeartbeatWaiters } from './heartbeat-waiters.js';

export type { AttemptServices } from './attempt-services.js';

/** One claimed attempt, as its worker hands it over. */
export interface ActivityAttemptOptions {
  /** The grant: the step row as the claim (or a turn's eager dispatch) returned it. */
  readonly row: ClaimedStepRow;
  /** The activity's definition on this worker. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly definition: ActivityDefinition<any, any>;
  /** The activity's lease, timeout and safety margin on this worker. */
  readonly timing: ActivityTiming;
  /** Monotonic ms when the claim that granted it was sent (the local deadline counts from there; I9). */
  readonly claimSentAtMs: number;
  readonly services: AttemptServices;
}

/**
 * One claimed attempt of an activity on this worker: the owner of its state — its abort signal, its poison, its
 * local deadlines ({@link AttemptDeadline}), its waiting heartbeats — and the run of its code. The context handed
 * to user code ({@link createActivityContext}), the fenced transaction ({@link runFencedTransaction}) and the
 * recording of the outcome ({@link AttemptOutcomes}, {@link recordAbortOutcome}) live beside it. Every owner write
 * goes through a fenced statement; after the first rejection the context is poisoned (I5) and every later call
 * throws without touching the DB.
 */
export class ActivityAttempt {
  readonly ref: AttemptRef & { readonly nonce: string };
  readonly controller = new AbortController();
  /** Details passed to ctx.heartbeat and not yet stored. */
  pendingDetails: { value: unknown } | undefined;
  private readonly row: ClaimedStepRow;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  private readonly definition: ActivityDefinition<any, any>;
  private readonly services: AttemptServices;
  private readonly label: string;
  private readonly deadline: AttemptDeadline;
  private readonly waiters = new HeartbeatWaiters();
  private readonly outcomes: AttemptOutcomes;
  private poison: PalisadeError | undefined;
  /** Set once the outcome is recorded (or given up): late ctx calls then fail without touching the DB. */
  private ended = false;

  constructor(o: ActivityAttemptOptions) {
    const { row, services } = o;
    this.row = row;
    this.definition = o.definition;
    this.services = services;
    this.label = `${row.name}#${row.seq}`;
    this.ref = {
      runId: row.run_id,
      stepId: row.id,
      stepLabel: this.label,
      attempt: row.attempt,
      token: BigInt(row.token),
      nonce: row.nonce,
    };
    this.deadline = new AttemptDeadline({
      claimSentAtMs: o.claimSentAtMs,
      remainingMs: row.remaining_ms,
      leaseMs: row.lease_ms,
      startToCloseTimeoutMs: row.start_to_close_timeout_ms,
      clock: { clockRateError: services.clockRateError, safetyMarginMs: o.timing.safetyMarginMs },
      onPassed: (which) => this.deadlinePassed(which),
    });
    this.outcomes = new AttemptOutcomes({
      row,
      definition: o.definition,
      ref: this.ref,
      label: this.label,
      services,
      leaseLostKnown: () => this.poison instanceof LeaseLostError,
      leaseLost: (error) => this.leaseLost(error),
      localDeadlineMs: () => this.deadline.leaseDeadlineMs,
    });
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** True while the attempt may still make owner writes. */
  get live(): boolean {
    return !this.controller.signal.aborted && !this.ended;
  }

  /**
   * A heartbeat sent at `sentAtMs` renewed the lease with `remainingMs` left, ending at the attempt deadline if
   * `capped` (as the database reports it: `remainingMs` alone cannot tell, since the statement reads the clock
   * more than once and a loaded server leaves an uncapped renewal several ms short of `leaseMs`). Moves the
   * deadline forward.
   */
  leaseRenewed(sentAtMs: number, remainingMs: number, capped: boolean): void {
    if (!this.live) return;
    this.deadline.renewed(sentAtMs, remainingMs, capped);
    this.waiters.renewed(sentAtMs);
  }

  /**
   * The database rejected this attempt's write: poison the context and fire the signal. The database's verdict
   * replaces a poison that was only inferred locally (the local deadline), so every later call throws this
   * LeaseLostError and no further owner write is sent for this nonce (I5).
   */
  leaseLost(error: LeaseLostError): void {
    if (!(this.poison instanceof LeaseLostError)) this.poison = error;
    this.services.events.emit('attempt:stale-rejected', { attempt: this.ref, error });
    // A cancel ends the step under its holder (DESIGN.md §4): the signal says `cancelled`, as activity code that
    // tells a cancel from a lost lease expects; the context is poisoned with the LeaseLostError all the same.
    this.abort(error.reason === 'cancelled' ? 'cancelled' : 'lease-lost', error.message, error);
  }

  /** Fire the signal with `reason`; idempotent (the first reason wins). */
  abort(reason: AbortReason, message: string, cause?: unknown): void {
    if (this.controller.signal.aborted) return;
    const error = new AttemptAbortedError(reason, `${this.label} attempt ${this.ref.attempt}: ${message}`, {
      ...this.ref,
      cause,
    });
    if (!this.poison)
      this.poison = this.ended
        ? this.endedError()
        : reason === 'lease-lost' && cause instanceof LeaseLostError
          ? cause
          : error;
    this.deadline.clear();
    this.services.logger.warn(
      { step: this.label, token: this.ref.token.toString(), reason },
      'attempt:aborted',
    );
    this.services.events.emit('attempt:aborted', { attempt: this.ref, reason, error });
    this.controller.abort(error);
    this.waiters.rejectAll(this.poison);
  }

  private deadlinePassed(which: PassedDeadline): void {
    if (which === 'deadline') {
      this.abort('deadline', `start-to-close timeout of ${this.row.start_to_close_timeout_ms} ms passed`);
    } else {
      this.abort(
        'lease-expired-locally',
        'no heartbeat succeeded in time; the lease may have expired (database unreachable or worker stalled)',
      );
    }
  }

  /**
   * Throw if the attempt may not make another owner write: poisoned, aborted, or its local deadline passed
   * (checked synchronously against the monotonic clock just before each effect; I11).
   */
  private assertUsable(): void {
    if (this.poison) throw this.poison;
    if (this.ended) throw this.endedError();
    if (this.deadline.leasePassed) {
      this.deadline.check();
      const poison = this.poison as PalisadeError | undefined;
      if (poison) throw poison;
    }
  }

  /** The context handed to `run(input, ctx)`. */
  context(): ActivityContext {
    return createActivityContext({
      row: this.row,
      token: this.ref.token,
      workerId: this.services.workerId,
      signal: this.controller.signal,
      heartbeat: (details) => this.heartbeat(details),
      fencedTransaction: (fn) => this.fencedTransaction(fn),
    });
  }

  private heartbeat(details?: unknown): Promise<void> {
    try {
      this.assertUsable();
      // On PGlite the heartbeat statement would wait for the open transaction, and the transaction for it.
      assertUsableOutsideTransaction(this.services.db, 'ctx.heartbeat');
      if (details !== undefined) {
        this.pendingDetails = { value: storableHeartbeatDetails(details, this.row.name, this.ref) };
      }
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    const renewed = this.waiters.add();
    this.services.requestHeartbeat();
    return renewed;
  }

  private fencedTransaction<T>(fn: (tx: FencedTransaction) => Promise<T>): Promise<T> {
    return runFencedTransaction(fn, {
      db: this.services.db,
      names: this.services.names,
      logger: this.services.logger,
      ref: this.ref,
      label: this.label,
      leaseMs: this.row.lease_ms,
      assertUsable: () => this.assertUsable(),
      leaseLost: (error) => this.leaseLost(error),
      localDeadlineMs: () => this.deadline.leaseDeadlineMs,
    });
  }

  /**
   * Run the activity and record its outcome; resolves when the outcome is recorded (or could not be). The code's
   * own end is reported earlier, through `codeSettled`.
   */
  async execute(): Promise<void> {
    const { events } = this.services;
    events.emit('attempt:started', { attempt: this.ref });
    let input: unknown;
    try {
      input = validate(this.definition.input, this.row.input, `input of activity ${this.row.name}`, this.ref);
    } catch (error) {
      await this.outcomes.recordFailure(serializeFailure(error), { forceNonRetryable: true });
      return;
    }
    const user: Promise<unknown> = Promise.resolve().then(() => this.definition.run(input, this.context()));
    const aborted = new Promise<'aborted'>((resolve) =>
      this.controller.signal.addEventListener('abort', () => resolve('aborted'), { once: true }),
    );
    const outcome = await Promise.race([
      user.then(
        (value) => ({ kind: 'returned' as const, value }),
        (error: unknown) => ({ kind: 'threw' as const, error }),
      ),
      aborted.then(() => ({ kind: 'aborted' as const })),
    ]);
    if (outcome.kind !== 'aborted') this.services.codeSettled?.();
    try {
      if (outcome.kind === 'aborted' || !this.live) {
        const reason = (this.controller.signal.reason as AttemptAbortedError | undefined)?.reason;
        await recordAbortOutcome(this.outcomes, reason, user);
      } else if (outcome.kind === 'returned') await this.outcomes.recordCompletion(outcome.value);
      else await this.outcomes.recordFailure(serializeFailure(outcome.error));
    } finally {
      this.deadline.clear();
      this.ended = true;
      // The context's poison from now on, made only when something waits or calls (an Error per attempt costs a
      // stack trace, a visible share of a worker's CPU on no-op jobs).
      if (this.waiters.waiting) this.waiters.rejectAll(this.poison ?? this.endedError());
    }
  }

  /** The poison of a context used after its attempt ended (made once, on first use). */
  private endedError(): PalisadeError {
    return (this.poison ??= new PalisadeError(
      'ATTEMPT_ABORTED',
      `${this.label} attempt ${this.ref.attempt} has ended; its context can no longer be used`,
      this.ref,
    ));
  }

  /** Release a grant that arrived with too little lease left, without running it (I12). */
  async releaseUnstarted(why: ReleaseWhy): Promise<void> {
    this.deadline.clear();
    await this.outcomes.release(why);
    this.controller.abort(new AttemptAbortedError('shutdown', `${this.label} released unstarted (${why})`));
  }
}
