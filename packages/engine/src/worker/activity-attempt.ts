import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'drizzle-orm';
import {
  AttemptAbortedError,
  CancelledFailure,
  LeaseLostError,
  PAYLOAD_LIMITS,
  PalisadeError,
  checkPayload,
  fencingInfo,
  isPalisadeError,
  retryDecision,
  serializeFailure,
  validate,
  type AbortReason,
  type ActivityContext,
  type ActivityDefinition,
  type FencedTransaction,
  type ResolvedRetryPolicy,
  type SerializedFailure,
} from '@palisade/sdk';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { faultHooks } from '../internal/fault-points.js';
import { classifyDatabaseError, isContentRefusal, sqlstateOf, withInfraRetry } from '../infra-retry.js';
import type { ActivityTiming } from '../options.js';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import type { CompletionBatcher } from './completion-batcher.js';
import { fenceStep, recordStaleRejection } from '../queries/fence-step.js';
import { releaseStep } from '../queries/release-step.js';
import {
  fenceHolds,
  transactionStatus,
  type TransactionStatus,
} from '../queries/settle-fenced-transaction.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';
import { assertUsableOutsideTransaction, openFencedTransaction } from '../db/fenced-scope.js';
import { localLeaseDeadline, monotonicNow } from './lease-clock.js';
import type { WorkerEvents } from './worker-events.js';
import type { FailedAttemptOutcome } from '../queries/fail-step.js';

/** What an attempt needs from its worker. */
export interface AttemptServices {
  readonly db: Database;
  readonly names: SchemaNames;
  readonly workerId: string;
  readonly clockRateError: number;
  readonly logger: Logger;
  readonly events: WorkerEvents;
  /** Where completions and failures go: batched with the worker's other outcomes of the same kind. */
  readonly completions: CompletionBatcher;
  /** Ask the heartbeat loop to renew now (coalesced; at most one heartbeat in flight). */
  requestHeartbeat(): void;
  /**
   * The activity's code has returned or thrown: its concurrency slot may take the next attempt while this one's
   * outcome is being recorded (the attempt keeps its lease, and its heartbeats, until the record commits).
   */
  codeSettled?(): void;
}

class FenceFailed extends Error {}

/** What {@link ActivityAttempt.fencedWrite} did: recorded, rejected or not made, or refused for its content. */
type WriteResult = 'recorded' | 'not-recorded' | { readonly refused: PalisadeError };

/**
 * What `promise` settles with, or `undefined` if `ms` pass first. The timer is cleared either way: a stopped
 * worker must leave no timer behind (a pending one also kept the attempt's closure alive for `ms`).
 */
async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Poll interval while a broken fenced transaction is still in progress on the server (ms). */
const SETTLE_POLL_MS = 50;

/** How long a shutdown or local-expiry abort waits for the activity to stop before leaving its lease to expire (ms). */
const SHUTDOWN_SETTLE_MS = 1_000;

/**
 * One claimed attempt of an activity on this worker: its local lease deadline, its abort signal, the context
 * handed to user code, and the recording of its outcome. Every owner write goes through a fenced statement;
 * after the first rejection the context is poisoned (I5) and every later call throws without touching the DB.
 */
export class ActivityAttempt {
  readonly ref: AttemptRef & { readonly nonce: string };
  readonly controller = new AbortController();
  readonly timing: ActivityTiming;
  /** Monotonic ms after which the worker must consider the lease lost. */
  localDeadlineMs: number;
  /** Monotonic ms of the local start-to-close deadline. */
  readonly attemptDeadlineMs: number;
  /**
   * True when the database capped the current lease at the attempt deadline (the claim or last renewal had
   * less than `leaseMs` to give): the lease then ends *at* the deadline, so reaching the local lease deadline
   * means the start-to-close timeout passed. Both local deadlines estimate the same instant from different send
   * times, and the lease one is usually a few ms earlier; without this the abort said `lease-expired-locally`,
   * nothing was recorded and the attempt was only ended by a later reclaim, without its retry backoff.
   */
  private leaseEndsAtDeadline: boolean;
  /** Details passed to ctx.heartbeat and not yet stored. */
  pendingDetails: { value: unknown } | undefined;
  private poison: PalisadeError | undefined;
  private timer: NodeJS.Timeout | undefined;
  private waiters: { sentAfter: number; resolve: () => void; reject: (e: unknown) => void }[] = [];
  private readonly label: string;

  constructor(
    readonly row: ClaimedStepRow,
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    readonly definition: ActivityDefinition<any, any>,
    timing: ActivityTiming,
    claimSentAtMs: number,
    private readonly services: AttemptServices,
  ) {
    this.timing = timing;
    this.label = `${row.name}#${row.seq}`;
    this.ref = {
      runId: row.run_id,
      stepId: row.id,
      stepLabel: this.label,
      attempt: row.attempt,
      token: BigInt(row.token),
      nonce: row.nonce,
    };
    this.localDeadlineMs = localLeaseDeadline(claimSentAtMs, row.remaining_ms, this.clockSettings());
    this.leaseEndsAtDeadline = row.start_to_close_timeout_ms <= row.lease_ms;
    this.attemptDeadlineMs =
      claimSentAtMs + row.start_to_close_timeout_ms * (1 - services.clockRateError) - timing.safetyMarginMs;
    this.armTimer();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** True while the attempt may still make owner writes. */
  get live(): boolean {
    return !this.controller.signal.aborted && !this.ended;
  }

  /** Set once the outcome is recorded (or given up): late ctx calls then fail without touching the DB. */
  private ended = false;

  private clockSettings() {
    return { clockRateError: this.services.clockRateError, safetyMarginMs: this.timing.safetyMarginMs };
  }

  /**
   * A heartbeat sent at `sentAtMs` renewed the lease with `remainingMs` left, ending at the attempt deadline if
   * `capped` (as the database reports it: `remainingMs` alone cannot tell, since the statement reads the clock
   * more than once and a loaded server leaves an uncapped renewal several ms short of `leaseMs`). Moves the
   * deadline forward.
   */
  leaseRenewed(sentAtMs: number, remainingMs: number, capped: boolean): void {
    if (!this.live) return;
    const next = localLeaseDeadline(sentAtMs, remainingMs, this.clockSettings());
    if (next > this.localDeadlineMs) {
      this.localDeadlineMs = next;
      this.leaseEndsAtDeadline = capped;
      this.armTimer();
    }
    for (const w of this.waiters.filter((w) => w.sentAfter <= sentAtMs)) w.resolve();
    this.waiters = this.waiters.filter((w) => w.sentAfter > sentAtMs);
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
      this.poison = reason === 'lease-lost' && cause instanceof LeaseLostError ? cause : error;
    clearTimeout(this.timer);
    this.services.logger.warn(
      { step: this.label, token: this.ref.token.toString(), reason },
      'attempt:aborted',
    );
    this.services.events.emit('attempt:aborted', { attempt: this.ref, reason, error });
    this.controller.abort(error);
    for (const w of this.waiters) w.reject(this.poison);
    this.waiters = [];
  }

  private armTimer(): void {
    clearTimeout(this.timer);
    const due = Math.min(this.localDeadlineMs, this.attemptDeadlineMs);
    this.timer = setTimeout(() => this.onTimer(), Math.max(0, due - monotonicNow()));
    this.timer.unref?.();
  }

  private onTimer(): void {
    const now = monotonicNow();
    if (now >= this.attemptDeadlineMs || (now >= this.localDeadlineMs && this.leaseEndsAtDeadline)) {
      this.abort('deadline', `start-to-close timeout of ${this.row.start_to_close_timeout_ms} ms passed`);
    } else if (now >= this.localDeadlineMs) {
      this.abort(
        'lease-expired-locally',
        'no heartbeat succeeded in time; the lease may have expired (database unreachable or worker stalled)',
      );
    } else this.armTimer();
  }

  /**
   * Throw if the attempt may not make another owner write: poisoned, aborted, or its local deadline passed
   * (checked synchronously against the monotonic clock just before each effect; I11).
   */
  private assertUsable(): void {
    if (this.poison) throw this.poison;
    if (monotonicNow() >= this.localDeadlineMs) {
      this.onTimer();
      const poison = this.poison as PalisadeError | undefined;
      if (poison) throw poison;
    }
  }

  /** The context handed to `run(input, ctx)`. */
  context(): ActivityContext {
    const info = Object.freeze({
      runId: this.row.run_id,
      stepId: this.row.id,
      activityName: this.row.name,
      seq: this.row.seq,
      attempt: this.row.attempt,
      epoch: this.row.epoch,
      fencing: fencingInfo(this.row.fencing_scope, this.ref.token),
      heartbeatDetails: this.row.heartbeat_details ?? undefined,
      queue: this.row.queue,
      workerId: this.services.workerId,
      leaseMs: this.row.lease_ms,
      startToCloseTimeoutMs: this.row.start_to_close_timeout_ms,
    });
    return {
      info,
      signal: this.controller.signal,
      heartbeat: (details?: unknown) => this.heartbeat(details),
      fencedTransaction: <T>(fn: (tx: FencedTransaction) => Promise<T>) => this.fencedTransaction(fn),
    };
  }

  private heartbeat(details?: unknown): Promise<void> {
    try {
      this.assertUsable();
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    try {
      // On PGlite the heartbeat statement would wait for the open transaction, and the transaction for it.
      assertUsableOutsideTransaction(this.services.db, 'ctx.heartbeat');
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    if (details !== undefined) {
      // Checked here, by the call that brought them: the heartbeat statement renews every lease of the worker at
      // once, and details it cannot store (a BigInt, a NUL, a cycle) would fail it for every attempt.
      // Stored as they were at this call (a copy): the caller may change the object before the statement is sent.
      let text: string;
      try {
        text = checkPayload(
          details,
          `heartbeat details of activity ${this.row.name}`,
          PAYLOAD_LIMITS.heartbeatDetailsBytes,
          this.ref,
        );
      } catch (error) {
        return Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
      this.pendingDetails = { value: JSON.parse(text) as unknown };
    }
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ sentAfter: monotonicNow(), resolve, reject });
      this.services.requestHeartbeat();
    });
  }

  private async fencedTransaction<T>(fn: (tx: FencedTransaction) => Promise<T>): Promise<T> {
    const outer = openFencedTransaction.getStore();
    if (outer !== undefined) {
      throw new PalisadeError(
        'FENCED_TRANSACTION_NESTED',
        `ctx.fencedTransaction was called inside the fenced transaction of ${outer}; fenced transactions do not ` +
          'nest (the inner one would commit, or wait, on its own connection): use the outer `tx` instead',
        this.ref,
      );
    }
    this.assertUsable();
    const { db, names } = this.services;
    const idleMs = Math.max(500, Math.floor(this.row.lease_ms / 3));
    let xid: string | undefined;
    let done: { result: T } | undefined;
    try {
      return await db.transaction(async (tx) => {
        // A frozen process must not hold the step's row lock (taken by the fence) or the user's locks forever (I16).
        // The transaction id comes with it, at no extra round trip, to settle a COMMIT whose reply is lost (I15).
        const [head] = await tx.rows<{ xid: string }>(sql`
          SELECT set_config('idle_in_transaction_session_timeout', ${String(idleMs)}, true),
                 set_config('statement_timeout', ${String(this.row.lease_ms)}, true), txid_current()::text AS xid`);
        xid = head?.xid;
        let result: T;
        try {
          result = await openFencedTransaction.run(this.label, () => fn(tx.drizzle));
        } catch (error) {
          throw sqlstateOf(error) === '25P02' ? this.abortedTransaction(error) : error;
        }
        this.assertUsable();
        const stall = faultHooks['fenced-transaction:before-fence'];
        if (stall) await stall(this.ref);
        let held: boolean;
        try {
          held = await fenceStep(tx, names, this.ref);
        } catch (error) {
          throw sqlstateOf(error) === '25P02' ? this.abortedTransaction(error) : error;
        }
        if (!held) throw new FenceFailed();
        const pause = faultHooks['fenced-transaction:before-commit'];
        if (pause) await pause(this.ref);
        done = { result };
        return result;
      });
    } catch (error) {
      if (error instanceof FenceFailed) {
        try {
          await recordStaleRejection(db, names, { ...this.ref, operation: 'fenced-transaction' });
        } catch (lost) {
          if (lost instanceof LeaseLostError) {
            this.leaseLost(lost);
            throw lost;
          }
          throw lost;
        }
      }
      if (xid !== undefined && error instanceof Error && classifyDatabaseError(error) === 'transient') {
        await this.settleBrokenTransaction(xid, error);
        // Committed: COMMIT is sent only after `fn` resolved and the fence held, so `done` is set.
        if (done) return done.result;
      }
      throw error;
    }
  }

  /** The callback left its transaction aborted (SQLSTATE 25P02): say so, instead of a bare driver error. */
  private abortedTransaction(cause: unknown): PalisadeError {
    return new PalisadeError(
      'FENCED_TRANSACTION_ABORTED',
      `the fenced transaction of ${this.label} was aborted by an SQL error inside its callback, which the callback ` +
        'caught and went on (SQLSTATE 25P02: every later statement is refused); nothing it wrote is committed. ' +
        'Let the error propagate, or wrap the statement that may fail in a savepoint (tx.transaction(...))',
      { ...this.ref, cause },
    );
  }

  /**
   * A fenced transaction failed with a connection-class error (server ended the session, connection reset, reply
   * lost): whether it committed is unknown to the driver. Settle it on another connection by its transaction id
   * rather than hand the caller an ambiguous error (I15): `'committed'` (the COMMIT went through; the caller gets
   * its result), or rolled back — then if the attempt no longer owns the step the caller gets
   * {@link LeaseLostError} (recorded, and the context is poisoned, as for a failed fence), and otherwise the
   * original error, which now surely means "not committed". A transaction still in progress (its backend has not
   * yet noticed the broken connection) is polled until the local lease deadline; if it is still unknown then, or
   * the database cannot be reached, the original error is thrown.
   * @returns only when the transaction committed; throws otherwise.
   */
  private async settleBrokenTransaction(xid: string, original: Error): Promise<'committed'> {
    const { db, names } = this.services;
    let status: TransactionStatus;
    let holds: boolean;
    try {
      const giveUpAt = Math.max(this.localDeadlineMs, monotonicNow() + 1_000);
      for (;;) {
        status = await withInfraRetry(() => transactionStatus(db, xid), {
          maxRetryTimeMs: Math.max(500, giveUpAt - monotonicNow()),
        });
        if (status !== 'in progress' || monotonicNow() >= giveUpAt) break;
        await sleep(SETTLE_POLL_MS);
      }
      if (status === 'committed') return 'committed';
      if (status === 'in progress') throw original;
      holds = await withInfraRetry(() => fenceHolds(db, names, this.ref), { maxRetryTimeMs: 1_000 });
    } catch (error) {
      if (error !== original) {
        this.services.logger.warn({ step: this.label, err: error }, 'attempt:fenced-transaction-unsettled');
      }
      throw original;
    }
    if (holds) throw original;
    try {
      await recordStaleRejection(db, names, { ...this.ref, operation: 'fenced-transaction' });
    } catch (error) {
      if (error instanceof LeaseLostError) {
        this.leaseLost(error);
        throw error;
      }
    }
    throw original;
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
      await this.recordFailure(serializeFailure(error), { forceNonRetryable: true });
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
      if (outcome.kind === 'aborted' || !this.live) await this.afterAbort(user);
      else if (outcome.kind === 'returned') await this.recordCompletion(outcome.value);
      else await this.recordFailure(serializeFailure(outcome.error));
    } finally {
      clearTimeout(this.timer);
      this.ended = true;
      this.poison ??= new PalisadeError(
        'ATTEMPT_ABORTED',
        `${this.label} attempt ${this.ref.attempt} has ended; its context can no longer be used`,
        this.ref,
      );
      for (const w of this.waiters) w.reject(this.poison);
      this.waiters = [];
    }
  }

  private async recordCompletion(value: unknown): Promise<void> {
    let output: unknown;
    const what = `output of activity ${this.row.name}`;
    try {
      output = validate(this.definition.output, value, what, this.ref);
      // An output the database cannot store (or that would not come back as it is) is refused here, so it
      // becomes this step's recorded non-retryable failure, never a write that fails and leaves the step to rerun.
      checkPayload(output, what, PAYLOAD_LIMITS.outputBytes, this.ref);
    } catch (error) {
      if (isPalisadeError(error, 'VALIDATION_FAILED') || isPalisadeError(error, 'PAYLOAD_TOO_LARGE')) {
        await this.recordFailure(serializeFailure(error), { forceNonRetryable: true });
        return;
      }
      throw error;
    }
    const result = await this.fencedWrite('complete', () =>
      this.services.completions.complete({ ...this.ref, output }, { seq: this.row.seq, name: this.row.name }),
    );
    if (result === 'recorded') this.services.events.emit('attempt:completed', { attempt: this.ref, output });
    else if (result !== 'not-recorded') {
      await this.recordFailure(
        {
          type: 'UnstorableOutput',
          message: `the database refused to store the ${what}: ${result.refused.message}`,
          nonRetryable: true,
        },
        { forceNonRetryable: true },
      );
    }
  }

  private async recordFailure(
    thrown: SerializedFailure,
    options: { forceNonRetryable?: boolean; outcome?: FailedAttemptOutcome } = {},
  ): Promise<void> {
    // A failure the engine refuses to retry (input or output failing its schema) is stored as non-retryable, so
    // the error readers get (RunFailedError.failure, events) agrees with what happened to the step.
    const failure = options.forceNonRetryable ? { ...thrown, nonRetryable: true } : thrown;
    const policy = this.row.retry_policy as ResolvedRetryPolicy;
    const retry =
      !options.forceNonRetryable &&
      options.outcome !== 'cancelled' &&
      retryDecision(policy, failure, this.row.attempt).retry;
    const fail = (error: SerializedFailure) =>
      this.fencedWrite('fail', () =>
        this.services.completions.fail({
          ...this.ref,
          error,
          retry,
          outcome: options.outcome ?? 'failed',
        }),
      );
    let stored = failure;
    let result = await fail(stored);
    if (typeof result === 'object') {
      // serializeFailure makes every failure storable; should the database still refuse one, record what
      // happened in a form it can store rather than leave the attempt to expire and run again.
      stored = {
        type: 'UnstorableFailure',
        message: `the database refused to store the failure of activity ${this.row.name} (${failure.type}): ${result.refused.message}`,
        nonRetryable: failure.nonRetryable,
      };
      result = await fail(stored);
    }
    if (result === 'recorded') {
      // The reason goes with the failure: its type, code and message (a stack only with the stored failure).
      const { type, code, message } = stored;
      this.services.logger.warn(
        {
          step: this.label,
          runId: this.ref.runId,
          attempt: this.ref.attempt,
          token: this.ref.token.toString(),
          retry,
          error: { type, ...(code ? { code } : {}), message },
        },
        'attempt:failed',
      );
      this.services.events.emit('attempt:failed', { attempt: this.ref, failure: stored, retry });
    }
  }

  private async afterAbort(user: Promise<unknown>): Promise<void> {
    const reason = (this.controller.signal.reason as AttemptAbortedError | undefined)?.reason;
    if (reason === 'deadline') {
      await this.recordFailure(
        {
          type: 'StartToCloseTimeout',
          message: `attempt ${this.ref.attempt} passed its start-to-close timeout of ${this.row.start_to_close_timeout_ms} ms`,
          nonRetryable: false,
        },
        { outcome: 'timed_out' },
      );
    } else if (reason === 'cancelled') {
      await this.recordFailure(serializeFailure(new CancelledFailure('cancel requested', this.ref)), {
        outcome: 'cancelled',
      });
    } else if (reason === 'shutdown') {
      // Release only if the activity stopped: handing a step to another worker while this one still runs it
      // would overlap executions. One that ignores the signal keeps its lease until it expires (heartbeats stop).
      const settled = await settledWithin(
        user.then(
          () => true,
          () => true,
        ),
        SHUTDOWN_SETTLE_MS,
      );
      if (settled) {
        const released = await this.fencedWrite('release', () =>
          releaseStep(this.services.db, this.services.names, { ...this.ref, why: 'shutdown' }),
        );
        if (released === 'recorded') {
          this.services.events.emit('attempt:released', { attempt: this.ref, why: 'shutdown' });
        }
      }
    } else if (reason === 'lease-expired-locally') {
      // The local deadline is a conservative estimate, not the database's verdict: the lease may still be live
      // (the stall ended inside the safety margin) or long superseded (case F01). Once the code has stopped,
      // report its outcome through the usual fenced write and let the database decide: accepted if this attempt
      // still owns the step, otherwise rejected with LeaseLostError and recorded as `attempt:stale-rejected`
      // (invariant 2: never a silent no-op). Code that does not stop in time records nothing; its lease expires.
      const settled = await settledWithin(
        user.then(
          (value) => ({ kind: 'returned' as const, value }),
          (error: unknown) => ({ kind: 'threw' as const, error }),
        ),
        SHUTDOWN_SETTLE_MS,
      );
      if (settled?.kind === 'returned') await this.recordCompletion(settled.value);
      else if (settled) await this.recordFailure(serializeFailure(settled.error));
    }
    // lease-lost: the database already rejected this attempt; nothing more may be recorded.
  }

  /** Release a grant that arrived with too little lease left, without running it (I12). */
  async releaseUnstarted(why: 'stale-grant' | 'shutdown'): Promise<void> {
    clearTimeout(this.timer);
    const released = await this.fencedWrite('release', () =>
      releaseStep(this.services.db, this.services.names, { ...this.ref, why }),
    );
    if (released === 'recorded') this.services.events.emit('attempt:released', { attempt: this.ref, why });
    this.controller.abort(new AttemptAbortedError('shutdown', `${this.label} released unstarted (${why})`));
  }

  /**
   * Make a fenced owner write, retrying transient database errors (they never consume an attempt; the writes
   * are idempotent by nonce) for as long as the local lease deadline allows.
   * @returns `recorded` when the write was recorded; `not-recorded` when it was rejected (LeaseLostError, handled
   * here) or could not be made — so callers announce an outcome (`attempt:completed`, …) only if the database has
   * it; `{ refused }` when the database refused the statement for a value's content (SQLSTATE class 22 or 54),
   * which no retry can mend: the caller records a failure instead.
   */
  private async fencedWrite(operation: string, write: () => Promise<unknown>): Promise<WriteResult> {
    if (this.poison instanceof LeaseLostError) return 'not-recorded';
    try {
      await withInfraRetry(write, {
        maxRetryTimeMs: Math.max(1_000, this.localDeadlineMs - monotonicNow()),
        onRetry: (error, n) =>
          this.services.logger.warn({ step: this.label, operation, err: error, n }, 'attempt:write-retry'),
      });
      return 'recorded';
    } catch (error) {
      if (error instanceof LeaseLostError) {
        this.leaseLost(error);
        return 'not-recorded';
      }
      this.services.logger.error({ step: this.label, operation, err: error }, 'attempt:write-failed');
      this.services.events.emit('worker:error', { error });
      if (isContentRefusal(error) && isPalisadeError(error)) return { refused: error };
      return 'not-recorded';
    }
  }
}
