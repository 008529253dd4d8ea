import type { Database } from '../db/database.js';
import { faultHooks } from '../internal/fault-points.js';
import { classifyDatabaseError } from '../infra-retry.js';
import type { ClaimedTurnRow } from '../queries/claim-turns.js';
import {
  attemptRefOf,
  completeSteps,
  type CompleteStepParams,
  type EagerTurns,
  type StepPosition,
} from '../queries/complete-step.js';
import { failSteps, type FailStepParams } from '../queries/fail-step.js';
import { settleFencedResult, type FencedResultRow } from '../queries/fenced-outcome.js';
import type { SchemaNames } from '../queries/schema-names.js';

/** An attempt's outcome to record: a completion or a failure. */
type Outcome =
  | { readonly kind: 'complete'; readonly params: CompleteStepParams }
  | { readonly kind: 'fail'; readonly params: FailStepParams };

/** An outcome waiting for its statement, with its caller's promise. */
type Pending = Outcome & {
  resolve(outcome: 'applied' | 'replayed'): void;
  reject(error: unknown): void;
};

/**
 * Where eager turns go: `reserve(most)` sets aside up to `most` of the turn slots free now (one per completion of
 * the batch at most; undefined: none, or no workflows), and
 * `adopt()` starts the turns the statement claimed with them and frees the rest — called once per reservation,
 * whether the statement succeeded or not.
 */
export interface EagerTurnHost {
  reserve(most: number): EagerTurns | undefined;
  adopt(reserved: EagerTurns, claimed: readonly ClaimedTurnRow[]): void;
  /**
   * A fused step (see TurnLoop.completeFused), present only on a worker with `fuseSteps`: record the completion
   * together with the run's next turn, run on the workflow instance this worker kept; `'applied'` when that
   * committed, undefined to record it the ordinary way.
   */
  readonly completeFused?: (
    completion: CompleteStepParams,
    step: StepPosition,
  ) => Promise<'applied' | undefined>;
}

/** Most completions (or failures) in one statement. */
export const MAX_COMPLETION_BATCH = 100;

/**
 * A worker's completions and failures, sent as few statements as the database allows (group commit): an outcome
 * waits at most for the statement in flight, then goes with every outcome of its kind that arrived meanwhile, in
 * one statement that fences each row on its own ({@link completeSteps}, {@link failSteps}). An outcome arriving
 * while nothing is in flight is sent on the next turn of the event loop, with whatever else ended in the same
 * turn. Completions and failures go in statements of their own, the kind of the oldest waiting outcome first.
 *
 * Each caller gets its own row's answer: `'applied'`, `'replayed'`, or its own `LeaseLostError`; a stale row
 * never fails its neighbours. A statement that fails as a whole fails every caller in it with that error when
 * the error is transient (each caller's write retry sends it again, and a completion that did commit comes
 * back `replayed`); any other error (a content the database refused) is retried row by row, so only the row
 * that caused it fails. At most one row per step goes in one statement (a reclaimed attempt and its successor
 * on one worker complete in two). Tests may hold a batch before it is sent and see each row's answer through the
 * fault points `completion:before-send` and `completion:after-commit` (../internal/fault-points.ts), which see
 * completions only.
 */
export class CompletionBatcher {
  private queue: Pending[] = [];
  private running = false;

  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    /** The worker's turns, when it runs workflows: completions claim the turns they wake for it (eager turns). */
    private readonly turns?: EagerTurnHost,
  ) {}

  /**
   * Record one attempt's result with the next batch of completions — or, for a step of a workflow run whose
   * instance this worker keeps (`step` given: its position and activity name), in one statement with the run's
   * next turn (a fused step), falling back to the batch when that does not apply.
   * @returns `'applied'`, or `'replayed'` when this attempt's completion had already committed.
   * @throws LeaseLostError when the attempt no longer holds its step; the statement's error otherwise.
   */
  complete(params: CompleteStepParams, step?: StepPosition): Promise<'applied' | 'replayed'> {
    const fuse = step && this.turns?.completeFused;
    if (!fuse) return this.enqueue({ kind: 'complete', params });
    return fuse(params, step).then((fused) => fused ?? this.enqueue({ kind: 'complete', params }));
  }

  /**
   * Record one attempt's failure with the next batch of failures.
   * @returns `'applied'`, or `'replayed'` when this attempt's failure had already committed.
   * @throws LeaseLostError when the attempt no longer holds its step; the statement's error otherwise.
   */
  fail(params: FailStepParams): Promise<'applied' | 'replayed'> {
    return this.enqueue({ kind: 'fail', params });
  }

  private enqueue(outcome: Outcome): Promise<'applied' | 'replayed'> {
    return new Promise((resolve, reject) => {
      this.queue.push({ ...outcome, resolve, reject });
      if (!this.running) {
        this.running = true;
        setImmediate(() => void this.drain());
      }
    });
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) await this.send(this.takeBatch());
    } finally {
      this.running = false;
    }
  }

  /** Up to {@link MAX_COMPLETION_BATCH} outcomes of the oldest one's kind, at most one per step, oldest first. */
  private takeBatch(): Pending[] {
    const batch: Pending[] = [];
    const steps = new Set<string>();
    const rest: Pending[] = [];
    const kind = this.queue[0]?.kind;
    for (const p of this.queue) {
      if (p.kind === kind && batch.length < MAX_COMPLETION_BATCH && !steps.has(p.params.stepId)) {
        steps.add(p.params.stepId);
        batch.push(p);
      } else rest.push(p);
    }
    this.queue = rest;
    return batch;
  }

  private async send(batch: readonly Pending[]): Promise<void> {
    let rows: FencedResultRow[];
    try {
      rows = await (batch[0]?.kind === 'fail' ? this.sendFailures(batch) : this.sendCompletions(batch));
    } catch (error) {
      if (batch.length > 1 && classifyDatabaseError(error) !== 'transient') {
        for (const p of batch) await this.send([p]);
        return;
      }
      for (const p of batch) p.reject(error);
      return;
    }
    for (const [k, p] of batch.entries()) {
      try {
        p.resolve(
          settleFencedResult(
            rows.find((r) => Number(r.ord) === k + 1),
            p.params,
            p.kind,
          ),
        );
      } catch (error) {
        p.reject(error);
      }
    }
  }

  private async sendFailures(batch: readonly Pending[]): Promise<FencedResultRow[]> {
    return failSteps(
      this.db,
      this.names,
      batch.flatMap((p) => (p.kind === 'fail' ? [p.params] : [])),
    );
  }

  private async sendCompletions(batch: readonly Pending[]): Promise<FencedResultRow[]> {
    const params = batch.flatMap((p) => (p.kind === 'complete' ? [p.params] : []));
    const beforeSend = faultHooks['completion:before-send'];
    if (beforeSend) await beforeSend(params.map(attemptRefOf));
    const eager = this.turns?.reserve(params.length);
    let answer;
    try {
      answer = await completeSteps(this.db, this.names, params, eager);
    } finally {
      // Whatever the statement claimed starts now; the rest of the reservation goes back.
      if (eager) this.turns?.adopt(eager, answer?.eagerTurns ?? []);
    }
    const rows = answer.rows;
    const afterCommit = faultHooks['completion:after-commit'];
    if (afterCommit) {
      await afterCommit(
        params.map((p, k) => {
          const row = rows.find((r) => Number(r.ord) === k + 1);
          const outcome = row?.applied ? 'applied' : row?.replayed ? 'replayed' : 'rejected';
          return { attempt: attemptRefOf(p), outcome };
        }),
      );
    }
    return rows;
  }
}
