/**
 * The worker's turn loop: claims due workflow turns, runs them in its turn slots (turn-execution.ts), takes the
 * turns a completion grants it (eager turns), runs fused steps (fused-turn.ts), and stops cleanly.
 */
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { classifyDatabaseError } from '../infra-retry.js';
import { claimTurns, msUntilNextDueTurn, type ClaimedTurnRow } from '../queries/claim-turns.js';
import { TurnConflict, releaseTurn } from '../queries/commit-turn.js';
import type { CompleteStepParams, EagerTurns, StepPosition } from '../queries/complete-step.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { runFusedTurn } from './fused-turn.js';
import { INSTANCE_WAIT_LEASE_FRACTION, InstanceCache } from './instance-cache.js';
import { executeTurn } from './turn-execution.js';
import { turnRefOf, type TurnLoopOptions, type TurnLoopParts } from './turn-parts.js';
import { WakeSignal, claimRetryDelayMs } from './wake-signal.js';
import type { WorkerEvents } from './worker-events.js';

/**
 * Claims due workflow turns and runs them: load the run's recorded steps, replay the workflow code over them
 * (`startTurn`), commit the result fenced on the turn's token (`commitTurn`). A turn that fails on a
 * database error is not retried in place: its lease expires and any worker replays it (turns are
 * deterministic, so a replay is always safe).
 *
 * Sticky workflows: after a turn commits blocked, the run's workflow instance (its code parked on the durable
 * calls it awaits) is kept, up to `workflowCacheSize` runs, least recently used dropped first. When this worker
 * claims the run's next turn and nothing but new outcomes changed its history since (`canContinue`), the
 * turn continues that instance with only the new outcomes the claim read; a turn then costs what is new, not the
 * whole history. Anything else — another worker's turn in between, a retry, an instance not kept — replays in full,
 * which gives the same result. A turn that fails in any way (commit refused, lease lost, a conflict, an error)
 * keeps nothing; neither does a run's end or `stop()`.
 */
export class TurnLoop {
  private readonly running = new Set<Promise<void>>();
  /** Turn slots set aside for the completion statement in flight (eager turns: {@link reserve}). */
  private reserved = 0;
  /** Called when the last reservation is given back, while stop() waits for that. */
  private reservationsSettled: (() => void) | undefined;
  private state: 'running' | 'stopping' = 'running';
  private readonly wakeSignal = new WakeSignal();
  private readonly done: Promise<void>;
  private readonly instances: InstanceCache;
  /** What the turns this loop runs work with. */
  private readonly parts: TurnLoopParts;

  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    private readonly options: TurnLoopOptions,
    private readonly events: WorkerEvents,
    private readonly logger: Logger,
  ) {
    this.instances = new InstanceCache(options.workflowCacheSize);
    this.parts = { db, names, options, instances: this.instances, events, logger };
    this.done = this.loop();
  }

  /** There may be a due turn (a NOTIFY): claim again now, or right after the claim in progress. */
  wake(): void {
    this.wakeSignal.notify();
  }

  private async loop(): Promise<void> {
    const workflowNames = [...this.options.workflows.keys()];
    let failures = 0;
    while (this.state === 'running') {
      let waitMs = this.options.pollIntervalMs;
      this.wakeSignal.take();
      try {
        const free = this.options.concurrency - this.running.size - this.reserved;
        const mark = this.wakeSignal.claimStarted();
        if (free > 0) {
          const rows = await claimTurns(this.db, this.names, {
            workerId: this.options.workerId,
            queues: this.options.queues,
            workflowNames,
            limit: free,
            leaseMs: this.options.turnLeaseMs,
            keepsInstances: this.options.workflowCacheSize > 0,
          });
          failures = 0;
          for (const row of rows) this.start(row, 'claimed');
          if (rows.length === free) continue;
          const dueIn = await msUntilNextDueTurn(this.db, this.names, {
            queues: this.options.queues,
            workflowNames,
          });
          if (dueIn !== null) waitMs = Math.min(waitMs, Math.max(0, dueIn));
          if (dueIn !== null && dueIn <= 0 && rows.length > 0) continue;
          // Eager turns and eager starts hand turns over without a claim: finished turns need not claim once drained.
          if (dueIn === null || dueIn > 0) this.wakeSignal.drainedSince(mark);
        }
      } catch (error) {
        failures++;
        waitMs = claimRetryDelayMs(this.options.pollIntervalMs, failures);
        this.logger.warn({ err: error, class: classifyDatabaseError(error) }, 'worker:turn-claim-failed');
        this.events.emit('worker:error', { error });
      }
      if (this.state !== 'running') break;
      await this.wakeSignal.sleep(waitMs);
    }
  }

  /**
   * Set aside up to `most` of the turn slots free now for a completion statement, which may claim the turns it wakes for this
   * worker (eager turns: the statement is an ordinary fenced grant, as {@link claimTurns}'s). Undefined when no
   * slot is free or the loop is stopping. Every reservation must be given back through {@link adopt}.
   */
  reserve(most: number): EagerTurns | undefined {
    if (this.state !== 'running') return undefined;
    const limit = Math.min(most, this.options.concurrency - this.running.size - this.reserved);
    if (limit <= 0) return undefined;
    this.reserved += limit;
    return {
      workerId: this.options.workerId,
      workflowNames: [...this.options.workflows.keys()],
      queues: this.options.queues,
      limit,
      leaseMs: this.options.turnLeaseMs,
      keepsInstances: this.options.workflowCacheSize > 0,
    };
  }

  /**
   * Start the turns a completion claimed with `reserved`, and free the slots it did not use. Once stop() began,
   * the turns are handed back instead (released, fenced, uncharged): a stopping worker starts nothing new.
   */
  adopt(reserved: EagerTurns, claimed: readonly ClaimedTurnRow[]): void {
    this.reserved -= reserved.limit;
    for (const row of claimed) {
      if (this.state === 'running') this.start(row, 'eager');
      else this.track(this.handBack(row), row.id);
    }
    if (claimed.length < reserved.limit) this.wakeSignal.slotFreed();
    if (this.reserved === 0) this.reservationsSettled?.();
  }

  private async handBack(row: ClaimedTurnRow): Promise<void> {
    const released = await releaseTurn(this.db, this.names, turnRefOf(row, this.options.turnLeaseMs));
    this.logger.info({ runId: row.id, released }, 'turn:released-unstarted');
  }

  private start(row: ClaimedTurnRow, grant: 'claimed' | 'eager'): void {
    const settled = this.options.results?.turnRunning(row.id);
    this.track(
      executeTurn(this.parts, row, grant).then(
        (ended) => settled?.(ended),
        (error: unknown) => {
          settled?.();
          throw error;
        },
      ),
      row.id,
    );
  }

  /** Count `work` as running until it settles; log what it throws (a conflict is expected, not an error). */
  private track(work: Promise<void>, runId?: string): void {
    const execution = work
      .catch((error: unknown) => {
        if (error instanceof TurnConflict) return;
        this.logger.warn({ err: error, runId }, 'turn:failed');
        this.events.emit('worker:error', { error });
      })
      .finally(() => {
        this.running.delete(execution);
        this.wakeSignal.slotFreed();
      });
    this.running.add(execution);
  }

  /**
   * A fused step: when this worker keeps the workflow instance of the completing step's run and that instance
   * awaits the step, run the run's next turn on it now, with the step's output as the only news, and record the
   * completion and commit the turn in one statement ({@link commitFusedTurn}: the statement grants the turn, fenced
   * on the completion and on proof that nothing else changed the run since the instance's last turn). The turn
   * holds one of the loop's turn slots while it runs.
   * @returns `'applied'` when that statement committed the completion; undefined when the completion is to be
   * recorded the ordinary way (no kept instance, no free turn slot, stopping, or the statement did not apply —
   * the instance is then dropped and the run's next turn replays in full). A database error falls back too: the
   * ordinary completion is then the idempotent retry of a statement whose outcome is unknown.
   */
  async completeFused(completion: CompleteStepParams, step: StepPosition): Promise<'applied' | undefined> {
    if (this.state !== 'running') return undefined;
    // Parallel steps of a run complete together: a fused turn of the run in progress holds its instance; wait for
    // it (it puts the instance back, awaiting this step, or drops it) rather than decide on a missing instance, and
    // take it in the tick the wait ends, before another completion of the run can.
    const kept = await this.instances.takeWhenBack(
      completion.runId,
      this.options.turnLeaseMs / INSTANCE_WAIT_LEASE_FRACTION,
      {
        stillWanted: () => this.state === 'running',
        wanted: (k) =>
          k.instance.continuable &&
          k.instance.awaits(step.seq) &&
          this.options.concurrency - this.running.size - this.reserved > 0,
      },
    );
    if (!kept) return undefined;
    let done!: () => void;
    const slot = new Promise<void>((resolve) => (done = resolve));
    this.running.add(slot);
    try {
      return await runFusedTurn(this.parts, kept, completion, step);
    } catch (error) {
      this.logger.warn({ err: error, runId: completion.runId }, 'turn:fused-failed');
      return undefined;
    } finally {
      this.instances.release(completion.runId);
      this.running.delete(slot);
      done();
      this.wakeSignal.slotFreed();
    }
  }

  /**
   * Stop claiming; wait for the completion statements holding reservations (what they claim is handed back) and
   * for turns in progress (they are short) to commit; drop the kept instances.
   */
  async stop(): Promise<void> {
    this.state = 'stopping';
    this.wakeSignal.notify();
    await this.done;
    if (this.reserved > 0) await new Promise<void>((resolve) => (this.reservationsSettled = resolve));
    await Promise.allSettled([...this.running]);
    this.instances.clear();
  }
}
