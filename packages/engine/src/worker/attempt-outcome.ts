import {
  LeaseLostError,
  PAYLOAD_LIMITS,
  isPalisadeError,
  serializeFailure,
  type ActivityDefinition,
  type PalisadeError,
  type SerializedFailure,
} from '@palisade/sdk';
import { checkPayload, retryDecision, validate, type ResolvedRetryPolicy } from '@palisade/sdk/internal';
import { isContentRefusal, withInfraRetry } from '../infra-retry.js';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';
import { releaseStep } from '../queries/release-step.js';
import type { FailedAttemptOutcome } from '../queries/fail-step.js';
import type { AttemptServices } from './attempt-services.js';
import { monotonicNow } from './lease-clock.js';

/** What {@link AttemptOutcomes.fencedWrite} did: recorded, rejected or not made, or refused for its content. */
type WriteResult = 'recorded' | 'not-recorded' | { readonly refused: PalisadeError };

/** Why an attempt is released unrun, or stops being run: see `releaseStep`. */
export type ReleaseWhy = 'stale-grant' | 'shutdown';

/** What {@link AttemptOutcomes} needs from its attempt. */
export interface AttemptOutcomesOptions {
  readonly row: ClaimedStepRow;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly definition: ActivityDefinition<any, any>;
  readonly ref: AttemptRef & { readonly nonce: string };
  /** `name#seq`, for logs. */
  readonly label: string;
  readonly services: AttemptServices;
  /** Whether the database already rejected the attempt: then no owner write is sent again for its nonce (I5). */
  leaseLostKnown(): boolean;
  /** The database rejected the attempt: poison its context and fire its signal. */
  leaseLost(error: LeaseLostError): void;
  /** The attempt's local lease deadline now (monotonic ms): transient errors are retried until then. */
  localDeadlineMs(): number;
}

/**
 * The recording of one attempt's outcome: its completion (the output checked against its schema and storable),
 * its failure (retried or not, by its retry policy), or its release. Every one is a fenced owner write; an event
 * (`attempt:completed`, `attempt:failed`, `attempt:released`) announces only what the database recorded.
 */
export class AttemptOutcomes {
  constructor(private readonly o: AttemptOutcomesOptions) {}

  get row(): ClaimedStepRow {
    return this.o.row;
  }

  get ref(): AttemptRef & { readonly nonce: string } {
    return this.o.ref;
  }

  /** Record the value the activity returned: its completion, or a non-retryable failure if it is not storable. */
  async recordCompletion(value: unknown): Promise<void> {
    const { row, ref, definition, services } = this.o;
    let output: unknown;
    const what = `output of activity ${row.name}`;
    try {
      output = validate(definition.output, value, what, ref);
      // An output the database cannot store (or that would not come back as it is) is refused here, so it
      // becomes this step's recorded non-retryable failure, never a write that fails and leaves the step to rerun.
      checkPayload(output, what, PAYLOAD_LIMITS.outputBytes, ref);
    } catch (error) {
      if (isPalisadeError(error, 'VALIDATION_FAILED') || isPalisadeError(error, 'PAYLOAD_TOO_LARGE')) {
        await this.recordFailure(serializeFailure(error), { forceNonRetryable: true });
        return;
      }
      throw error;
    }
    const result = await this.fencedWrite('complete', () =>
      services.completions.complete({ ...ref, output }, { seq: row.seq, name: row.name }),
    );
    if (result === 'recorded') services.events.emit('attempt:completed', { attempt: ref, output });
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

  /**
   * Record a failure: retried (the step scheduled again after its backoff) when its retry policy allows and it is
   * not `forceNonRetryable` or a cancel, else final; `outcome` names the attempt's ending (default `failed`).
   */
  async recordFailure(
    thrown: SerializedFailure,
    options: { forceNonRetryable?: boolean; outcome?: FailedAttemptOutcome } = {},
  ): Promise<void> {
    const { row, ref, label, services } = this.o;
    // A failure the engine refuses to retry (input or output failing its schema) is stored as non-retryable, so
    // the error readers get (RunFailedError.failure, events) agrees with what happened to the step.
    const failure = options.forceNonRetryable ? { ...thrown, nonRetryable: true } : thrown;
    const policy = row.retry_policy as ResolvedRetryPolicy;
    const retry =
      !options.forceNonRetryable &&
      options.outcome !== 'cancelled' &&
      retryDecision(policy, failure, row.attempt).retry;
    const fail = (error: SerializedFailure) =>
      this.fencedWrite('fail', () =>
        services.completions.fail({
          ...ref,
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
        message: `the database refused to store the failure of activity ${row.name} (${failure.type}): ${result.refused.message}`,
        nonRetryable: failure.nonRetryable,
      };
      result = await fail(stored);
    }
    if (result === 'recorded') {
      // The reason goes with the failure: its type, code and message (a stack only with the stored failure).
      const { type, code, message } = stored;
      services.logger.warn(
        {
          step: label,
          runId: ref.runId,
          attempt: ref.attempt,
          token: ref.token.toString(),
          retry,
          error: { type, ...(code ? { code } : {}), message },
        },
        'attempt:failed',
      );
      services.events.emit('attempt:failed', { attempt: ref, failure: stored, retry });
    }
  }

  /** Release the step, uncharged, claimable at once (fenced); announces `attempt:released` if recorded. */
  async release(why: ReleaseWhy): Promise<void> {
    const { db, names, events } = this.o.services;
    const released = await this.fencedWrite('release', () => releaseStep(db, names, { ...this.o.ref, why }));
    if (released === 'recorded') events.emit('attempt:released', { attempt: this.o.ref, why });
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
    const { label, services } = this.o;
    if (this.o.leaseLostKnown()) return 'not-recorded';
    try {
      await withInfraRetry(write, {
        maxRetryTimeMs: Math.max(1_000, this.o.localDeadlineMs() - monotonicNow()),
        onRetry: (error, n) =>
          services.logger.warn({ step: label, operation, err: error, n }, 'attempt:write-retry'),
      });
      return 'recorded';
    } catch (error) {
      if (error instanceof LeaseLostError) {
        this.o.leaseLost(error);
        return 'not-recorded';
      }
      services.logger.error({ step: label, operation, err: error }, 'attempt:write-failed');
      services.events.emit('worker:error', { error });
      if (isContentRefusal(error) && isPalisadeError(error)) return { refused: error };
      return 'not-recorded';
    }
  }
}
