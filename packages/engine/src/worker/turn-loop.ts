import { storableFailure, type WorkflowDefinition } from '@palisade/sdk';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { classifyDatabaseError, isContentRefusal } from '../infra-retry.js';
import {
  claimTurns,
  loadRunHistory,
  readHistoryNews,
  msUntilNextDueTurn,
  type ClaimedTurnRow,
} from '../queries/claim-turns.js';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import {
  TurnConflict,
  commitFusedTurn,
  commitTurn,
  releaseTurn,
  type CommittedFusedTurn,
  type EagerDispatch,
  type TurnRef,
} from '../queries/commit-turn.js';
import { faultHooks, type TurnFault } from '../internal/fault-points.js';
import { monotonicNow } from './lease-clock.js';
import {
  attemptRefOf,
  type CompleteStepParams,
  type EagerTurns,
  type StepPosition,
} from '../queries/complete-step.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';
import { asStoredJson } from '../turn/stored-json.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { WakeSignal, claimRetryDelayMs } from './wake-signal.js';
import type { WorkerEvents } from './worker-events.js';
import { InstanceCache, canContinue, type KeptInstance } from './instance-cache.js';
import type { TurnOutcome, TurnParams, TurnResult, WorkflowInstance } from '../turn/contract.js';
import { startTurn } from '../turn/run-turn.js';
import { nodeTurnHost } from './non-durable-await.js';
import type { EndedRun, LocalResults } from '../db/notification-hub.js';

export interface TurnLoopOptions {
  readonly workerId: string;
  readonly queues: readonly string[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflows: ReadonlyMap<string, WorkflowDefinition<any, any>>;
  readonly concurrency: number;
  readonly turnLeaseMs: number;
  readonly pollIntervalMs: number;
  /** Workflow instances kept between turns (0: none; every turn replays in full). */
  readonly workflowCacheSize: number;
  /** The worker's activity slots, when it serves activities: a turn's commit grants it the steps it schedules. */
  readonly dispatch?: EagerDispatchHost;
  /**
   * The `handle.result()` waiters of this process: told of each turn that runs here, and, once it settled, of
   * the run's end as stored when its commit ended the run.
   */
  readonly results?: LocalResults;
}

/**
 * Where eager dispatch goes: `reserve(most)` sets aside up to `most` of the activity slots free now (as many as
 * the turn schedules; undefined: none), `adopt()` starts
 * the steps a committed turn granted with them (`sentAtMs`: monotonic time before the commit was sent, for the
 * local lease deadline) and frees the rest — called once per reservation, with no steps when the commit failed.
 */
export interface EagerDispatchHost {
  reserve(most: number): EagerDispatch | undefined;
  adopt(reserved: EagerDispatch, granted: readonly ClaimedStepRow[], sentAtMs: number): void;
}

/**
 * Claims due workflow turns and runs them: load the run's recorded steps, replay the workflow code over them
 * ({@link startTurn}), commit the result fenced on the turn's token ({@link commitTurn}). A turn that fails on a
 * database error is not retried in place: its lease expires and any worker replays it (turns are
 * deterministic, so a replay is always safe).
 *
 * Sticky workflows: after a turn commits blocked, the run's workflow instance (its code parked on the durable
 * calls it awaits) is kept, up to `workflowCacheSize` runs, least recently used dropped first. When this worker
 * claims the run's next turn and nothing but new outcomes changed its history since ({@link canContinue}), the
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

  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    private readonly options: TurnLoopOptions,
    private readonly events: WorkerEvents,
    private readonly logger: Logger,
  ) {
    this.instances = new InstanceCache(options.workflowCacheSize);
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
    const released = await releaseTurn(this.db, this.names, this.turnRefOf(row));
    this.logger.info({ runId: row.id, released }, 'turn:released-unstarted');
  }

  private turnRefOf(row: ClaimedTurnRow): TurnRef {
    return {
      runId: row.id,
      workflowName: row.name,
      token: BigInt(row.token),
      nonce: row.nonce,
      attempt: row.turn_attempt,
      wakeCount: row.wake_count,
      cancelRequested: row.cancel_requested,
      leaseMs: this.options.turnLeaseMs,
      nowMs: row.now_ms,
    };
  }

  private start(row: ClaimedTurnRow, grant: 'claimed' | 'eager'): void {
    const settled = this.options.results?.turnRunning(row.id);
    this.track(
      this.execute(row, grant).then(
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

  /** Run and commit one turn. @returns the run's end as stored, when this turn ended it. */
  private async execute(row: ClaimedTurnRow, grant: 'claimed' | 'eager'): Promise<EndedRun | undefined> {
    const workflow = this.options.workflows.get(row.name);
    if (!workflow) return undefined; // unreachable: the claim filters by our workflow names
    const beforeRun = faultHooks['turn:before-run'];
    if (beforeRun) await beforeRun(turnFaultOf(row, grant));
    const params: TurnParams = {
      info: Object.freeze({
        runId: row.id,
        workflowName: row.name,
        turnAttempt: row.turn_attempt,
        queue: row.queue,
      }),
      priority: row.priority,
      nowMs: row.now_ms,
      ...(row.started_ms !== null ? { startedMs: row.started_ms } : {}),
      cancelRequested: row.cancel_requested,
      signals: row.signals ?? [],
    };
    // No later than the grant's database time (row.now_ms) in monotonic time: a kept instance's clock bound.
    const grantedAtMs = monotonicNow();
    // Taken out for the turn: put back only once this turn has committed blocked.
    const kept = this.instances.take(row.id);
    let instance: WorkflowInstance | undefined;
    let result: TurnResult | undefined;
    // The grant carries the news unless its snapshot may have missed a writer of the history that committed
    // before it locked the run. Then, if this worker ran the previous turn and kept its instance, the news is
    // read on its own (a snapshot taken now, as a full replay's read is), not the whole history.
    const news =
      row.history_news ??
      (kept && row.ran_last_turn && row.turn_epoch === kept.turnEpoch + 1
        ? await readHistoryNews(this.db, this.names, row.id, row.now_ms)
        : null);
    if (kept && news && canContinue(kept, { turnEpoch: row.turn_epoch, news })) {
      instance = kept.instance;
      result = await instance.continueTurn({ ...params, fresh: news.fresh });
    }
    const replay = result ? 'continued' : 'full';
    if (!result) {
      // The run's first turn grant ever (turn epochs only grow, retries included): no turn has committed, so
      // the run has no steps to read.
      const history = row.turn_epoch === 1 ? [] : await loadRunHistory(this.db, this.names, row.id);
      ({ result, instance } = await startTurn({
        ...params,
        host: nodeTurnHost,
        workflow,
        input: row.input,
        history,
      }));
    }
    const ref = this.turnRefOf(row);
    let committed = result;
    const beforeCommit = faultHooks['turn:before-commit'];
    if (beforeCommit) await beforeCommit(turnFaultOf(row, grant));
    // Eager dispatch only for a turn that schedules activities (a reservation holds slots until the commit ends).
    const scheduled = result.newSteps.filter((s) => s.kind === 'activity' && !s.cancelled).length;
    const dispatch = scheduled > 0 ? this.options.dispatch : undefined;
    let reserved = dispatch?.reserve(scheduled);
    let granted: readonly ClaimedStepRow[] = [];
    const sentAtMs = monotonicNow();
    // The run's end as stored, when this commit ends it: the result waiters of this process are answered from it.
    let ended: EndedRun | undefined;
    try {
      ({ eagerSteps: granted, ended } = await commitTurn(this.db, this.names, ref, result, reserved));
    } catch (error) {
      if (reserved) dispatch?.adopt(reserved, [], sentAtMs); // nothing was granted: the commit rolled back
      reserved = undefined;
      // The database refused the turn for a value's content (the commit rolled back; the turn still holds its
      // lease). Replaying cannot change that: the same code makes the same values, so the turn would fail every
      // lease, forever, and a cancel could never end the run. Fail the run instead, recorded, with the reason.
      if (!isContentRefusal(error)) throw error;
      const message = error instanceof Error ? error.message : String(error);
      committed = {
        newSteps: [],
        deliveries: [],
        outcome: {
          kind: 'failed',
          error: storableFailure({
            type: 'UnstorableTurn',
            message: `the database refused to store a turn of workflow ${row.name}: ${message}`,
            nonRetryable: true,
          }),
        },
      };
      this.logger.warn({ err: error, runId: row.id }, 'turn:unstorable');
      ({ ended } = await commitTurn(this.db, this.names, ref, committed));
    }
    try {
      const beforeStart = faultHooks['dispatch:before-start'];
      if (beforeStart && granted.length > 0) {
        await beforeStart(turnFaultOf(row, grant), attemptRefsOf(granted));
      }
    } finally {
      if (reserved) dispatch?.adopt(reserved, granted, sentAtMs);
    }
    if (committed.outcome.kind === 'blocked' && instance?.continuable) {
      this.instances.put(row.id, {
        instance,
        turnEpoch: row.turn_epoch,
        turnAttempt: row.turn_attempt,
        wakeCount: row.wake_count,
        workflowName: row.name,
        queue: row.queue,
        priority: row.priority,
        dbNowMs: row.now_ms,
        atMonotonicMs: grantedAtMs,
      });
    }
    this.committed(row.id, row.name, committed.outcome, replay, grant);
    return ended;
  }

  /**
   * Announce a committed turn (`turn:committed`); a turn that ended the run failed or cancelled also logs why
   * (`run:failed` warning, `run:cancelled` info), with the error's type, code and message: the reason, not only
   * that it happened.
   */
  private committed(
    runId: string,
    workflow: string,
    outcome: TurnOutcome,
    replay: 'full' | 'continued',
    grant: 'claimed' | 'eager' | 'fused',
  ): void {
    if (outcome.kind === 'failed' || outcome.kind === 'cancelled') {
      const { type, code, message } = outcome.error;
      this.logger[outcome.kind === 'failed' ? 'warn' : 'info'](
        { runId, workflow, error: { type, ...(code ? { code } : {}), message } },
        `run:${outcome.kind}`,
      );
    }
    this.events.emit('turn:committed', {
      runId,
      workflow,
      outcome: outcome.kind,
      replay,
      grant,
      ...(outcome.kind === 'failed' || outcome.kind === 'cancelled' ? { error: outcome.error } : {}),
    });
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
    const kept = this.instances.peek(completion.runId);
    if (!kept?.instance.continuable || !kept.instance.awaits(step.seq)) return undefined;
    if (this.options.concurrency - this.running.size - this.reserved <= 0) return undefined;
    this.instances.take(completion.runId);
    let done!: () => void;
    const slot = new Promise<void>((resolve) => (done = resolve));
    this.running.add(slot);
    try {
      return await this.fusedTurn(kept, completion, step);
    } catch (error) {
      this.logger.warn({ err: error, runId: completion.runId }, 'turn:fused-failed');
      return undefined;
    } finally {
      this.running.delete(slot);
      done();
      this.wakeSignal.slotFreed();
    }
  }

  private async fusedTurn(
    kept: KeptInstance,
    completion: CompleteStepParams,
    step: StepPosition,
  ): Promise<'applied' | undefined> {
    const runId = completion.runId;
    const atMonotonicMs = monotonicNow();
    const nowMs = kept.dbNowMs + Math.max(0, atMonotonicMs - kept.atMonotonicMs);
    const fault: TurnFault = {
      runId,
      workflowName: kept.workflowName,
      token: completion.token,
      turnAttempt: kept.turnAttempt + 1,
      grant: 'fused',
    };
    const beforeRun = faultHooks['turn:before-run'];
    if (beforeRun) await beforeRun(fault);
    const settled = this.options.results?.turnRunning(runId);
    let ended: EndedRun | undefined;
    try {
      const result = await kept.instance.continueTurn({
        info: Object.freeze({
          runId,
          workflowName: kept.workflowName,
          turnAttempt: kept.turnAttempt + 1,
          queue: kept.queue,
        }),
        priority: kept.priority,
        nowMs,
        cancelRequested: false,
        fresh: [
          {
            id: completion.stepId,
            seq: step.seq,
            kind: 'activity',
            name: step.name,
            status: 'completed',
            output: asStoredJson(completion.output),
            error: null,
            delivered_seq: null,
            due_ms: null,
            finished_ms: nowMs,
          },
        ],
      });
      if (!result) return undefined;
      const beforeCommit = faultHooks['turn:before-commit'];
      if (beforeCommit) await beforeCommit(fault);
      const completionRef = [attemptRefOf(completion)];
      const beforeSend = faultHooks['completion:before-send'];
      if (beforeSend) await beforeSend(completionRef);
      const scheduled = result.newSteps.filter((s) => s.kind === 'activity' && !s.cancelled).length;
      const dispatch = scheduled > 0 ? this.options.dispatch : undefined;
      const reserved = dispatch?.reserve(scheduled);
      const sentAtMs = monotonicNow();
      let committed: CommittedFusedTurn | undefined;
      try {
        committed = await commitFusedTurn(
          this.db,
          this.names,
          {
            runId,
            workflowName: kept.workflowName,
            workerId: this.options.workerId,
            turnEpoch: kept.turnEpoch,
            turnAttempt: kept.turnAttempt,
            wakeCount: kept.wakeCount,
            nowMs,
            completion,
          },
          result,
          reserved,
        );
      } finally {
        if (reserved && !committed?.eagerSteps.length) dispatch?.adopt(reserved, [], sentAtMs);
      }
      // Not applied: nothing was written, and the ordinary completion that follows reports its own outcome.
      if (!committed.applied || !committed.turn) return undefined;
      const afterCommit = faultHooks['completion:after-commit'];
      if (afterCommit) await afterCommit(completionRef.map((attempt) => ({ attempt, outcome: 'applied' })));
      ended = committed.ended;
      if (reserved && committed.eagerSteps.length > 0) {
        try {
          const beforeStart = faultHooks['dispatch:before-start'];
          if (beforeStart) await beforeStart(fault, attemptRefsOf(committed.eagerSteps));
        } finally {
          dispatch?.adopt(reserved, committed.eagerSteps, sentAtMs);
        }
      }
      if (result.outcome.kind === 'blocked' && kept.instance.continuable) {
        this.instances.put(runId, {
          ...kept,
          turnEpoch: committed.turn.epoch,
          turnAttempt: committed.turn.attempt,
          dbNowMs: nowMs,
          atMonotonicMs,
        });
      }
      this.committed(runId, kept.workflowName, result.outcome, 'continued', 'fused');
      return 'applied';
    } finally {
      settled?.(ended);
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

/** Granted steps as the fault points show their attempts. */
function attemptRefsOf(granted: readonly ClaimedStepRow[]): AttemptRef[] {
  return granted.map((s) => ({
    runId: s.run_id,
    stepId: s.id,
    stepLabel: `${s.name}#${s.seq}`,
    attempt: s.attempt,
    token: BigInt(s.token),
  }));
}

/** A turn as the turn fault points show it (only built when a hook is set). */
function turnFaultOf(row: ClaimedTurnRow, grant: 'claimed' | 'eager'): TurnFault {
  return {
    runId: row.id,
    workflowName: row.name,
    token: BigInt(row.token),
    turnAttempt: row.turn_attempt,
    grant,
  };
}
