import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import { InvalidOptionsError } from '@palisade/sdk';
import type { Database } from '../db/database.js';
import { classifyDatabaseError } from '../infra-retry.js';
import { faultHooks } from '../internal/fault-points.js';
import {
  resolveStopOptions,
  resolveWorkerOptions,
  type ResolvedWorkerOptions,
  type StopOptions,
  type WorkerOptions,
} from '../options.js';
import { claimSteps, type ClaimedStepRow } from '../queries/claim-steps.js';
import type { EagerDispatch } from '../queries/commit-turn.js';
import { CompletionBatcher, MAX_COMPLETION_BATCH } from './completion-batcher.js';
import { expireSteps } from '../queries/expire-steps.js';
import { findClaimedByRequest } from '../queries/find-claimed-by-request.js';
import { msUntilNextDueStep } from '../queries/next-due-step.js';
import { notificationItems } from '../queries/notify.js';
import { releaseStep } from '../queries/release-step.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { TurnLoop } from '../workflow/turn-loop.js';
import { ActivityAttempt } from './activity-attempt.js';
import { HeartbeatLoop } from './heartbeat-loop.js';
import { RetentionSweeper } from './retention-sweeper.js';
import { activityRunParams } from '../schedules/evaluate-schedules.js';
import { UnservedWorkMonitor } from './unserved-work-monitor.js';
import { ScheduleEvaluator } from './schedule-evaluator.js';
import { isGrantFresh, localLeaseDeadline, monotonicNow } from './lease-clock.js';
import { WakeSignal, claimRetryDelayMs } from './wake-signal.js';
import { WorkerEvents } from './worker-events.js';
import type { CompleteStepParams, EagerTurns, StepPosition } from '../queries/complete-step.js';
import type { ClaimedTurnRow } from '../queries/claim-turns.js';
import type { LocalResults } from '../db/notification-hub.js';

export type { StopOptions } from '../options.js';

/** Prefetch claims ahead one grant per recent attempt whose code ran shorter than this (ms): see WorkerOptions.prefetch. */
const PREFETCH_SHORT_MS = 200;

/** What a worker needs from its engine. */
export interface WorkerHost {
  readonly db: Database;
  readonly names: SchemaNames;
  readonly logger: Logger;
  /** The engine's retention of finished runs (ms); the worker sweeps past it. `null`: no sweeping. */
  readonly retentionMs: number | null;
  /** See TurnLoopOptions.results: the engine's `handle.result()` waiters. */
  readonly results?: LocalResults;
}

/**
 * Serves activities from a set of queues: claims due steps in batches (one statement), runs each in a
 * concurrency slot with a fenced context, renews all its leases in one statement per heartbeat interval on a
 * reserved connection, wakes on NOTIFY with bounded polling as a fallback and otherwise sleeps until the next
 * due time, and ends expired steps that must not be retried; with the engine's `retention`, it also deletes
 * finished runs past it, in the background, and (unless `schedules: false`) it fires the due ticks of schedules. No global state: many workers (and engines) can
 * live in one process.
 */
export class Worker {
  readonly options: ResolvedWorkerOptions;
  readonly events = new WorkerEvents();
  /** Attempts this worker holds, from their claim until their outcome is recorded (or cannot be). */
  private readonly active = new Set<ActivityAttempt>();
  /** Attempts whose code runs: each holds one of the `concurrency` slots. */
  private readonly busy = new Set<ActivityAttempt>();
  /** Slots set aside for turn commits that may grant this worker the steps they schedule (eager dispatch). */
  private reservedSlots = 0;
  private readonly executions = new Set<Promise<void>>();
  private heartbeats: HeartbeatLoop | undefined;
  private turns: TurnLoop | undefined;
  private retention: RetentionSweeper | undefined;
  private unserved: UnservedWorkMonitor | undefined;
  private schedules: ScheduleEvaluator | undefined;
  private heartbeatConnection: (Database & { release(): Promise<void> }) | undefined;
  private unlisten: (() => Promise<void>) | undefined;
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private readonly wakeSignal = new WakeSignal();
  private loop: Promise<void> | undefined;
  private lastMaintenanceMs = 0;
  private readonly unsettledClaims: string[] = [];
  private readonly completions: CompletionBatcher;
  /** Grants claimed ahead of a free slot, oldest first, each with the time its claim was sent (prefetch). */
  private readonly prefetched: { readonly row: ClaimedStepRow; readonly sentAt: number }[] = [];
  /** Whether the code of each of the worker's last `prefetch` attempts ran short, oldest first. */
  private readonly recentRuns: boolean[] = [];

  constructor(
    private readonly host: WorkerHost,
    options: WorkerOptions,
  ) {
    const defaultId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.options = resolveWorkerOptions(options, defaultId);
    this.events.listenerFailed = (event, error) =>
      host.logger.error({ err: error, event, workerId: this.options.workerId }, 'worker:listener-failed');
    this.completions = new CompletionBatcher(host.db, host.names, {
      reserve: (most) => this.turns?.reserve(most),
      adopt: (reserved, claimed) => this.turns?.adopt(reserved, claimed),
      ...(this.options.fuseSteps
        ? {
            completeFused: (completion: CompleteStepParams, step: StepPosition) =>
              this.turns?.completeFused(completion, step) ?? Promise.resolve(undefined),
          }
        : {}),
    });
  }

  get workerId(): string {
    return this.options.workerId;
  }

  /** Attempts running now. */
  get runningAttempts(): number {
    return this.active.size;
  }

  /**
   * Start serving. Resolves once the heartbeat connection is reserved and LISTEN is active.
   * @throws InvalidOptionsError when called twice.
   */
  async start(): Promise<void> {
    if (this.state !== 'idle') {
      throw new InvalidOptionsError('worker', [
        { path: 'start', message: `worker is ${this.state}; start() is legal once` },
      ]);
    }
    this.state = 'running';
    const { db, names, logger } = this.host;
    this.heartbeatConnection = await db.reserveHeartbeatConnection();
    this.heartbeats = new HeartbeatLoop(
      this.heartbeatConnection,
      names,
      this.options.heartbeatIntervalMs,
      this.options.heartbeatTimeoutMs,
      this.events,
      logger,
    );
    this.heartbeats.start();
    this.unlisten = await db.listen(names.channel, (payload) => {
      for (const item of notificationItems(payload)) {
        const [kind, queue] = [item.slice(0, item.indexOf(':')), item.slice(item.indexOf(':') + 1)];
        if (!this.options.queues.includes(queue)) continue;
        if (kind === 'step') this.wakeSignal.notify();
        else if (kind === 'turn') this.turns?.wake();
      }
    });
    if (this.options.activities.size > 0) this.loop = this.claimLoop();
    if (this.options.workflows.size > 0) {
      this.turns = new TurnLoop(
        db,
        names,
        {
          workerId: this.workerId,
          queues: this.options.queues,
          workflows: this.options.workflows,
          concurrency: this.options.workflowConcurrency,
          workflowCacheSize: this.options.workflowCacheSize,
          turnLeaseMs: this.options.turnLeaseMs,
          pollIntervalMs: this.options.pollIntervalMs,
          dispatch: {
            reserve: (most) => this.reserveDispatch(most),
            adopt: (reserved, granted, sentAt) => this.adoptDispatch(reserved, granted, sentAt),
          },
          ...(this.host.results ? { results: this.host.results } : {}),
        },
        this.events,
        logger,
      );
    }
    if (this.host.retentionMs !== null) {
      this.retention = new RetentionSweeper({
        db,
        names,
        retentionMs: this.host.retentionMs,
        intervalMs: this.options.retentionSweepIntervalMs,
        events: this.events,
        logger,
      });
      this.retention.start();
    }
    if (this.options.schedules) {
      this.schedules = new ScheduleEvaluator({
        db,
        names,
        pollIntervalMs: this.options.pollIntervalMs,
        events: this.events,
        logger,
        activities: activityRunParams(this.options.activities.values()),
      });
      this.schedules.start();
    }
    this.unserved = new UnservedWorkMonitor({
      db,
      names,
      workerId: this.workerId,
      pollIntervalMs: this.options.pollIntervalMs,
      queues: this.options.queues,
      activityNames: [...this.options.activities.keys()],
      workflowNames: [...this.options.workflows.keys()],
      events: this.events,
      logger,
    });
    this.unserved.start();
    this.events.emit('worker:started', { workerId: this.workerId });
    logger.info({ workerId: this.workerId, queues: this.options.queues }, 'worker:started');
  }

  private async claimLoop(): Promise<void> {
    const { logger } = this.host;
    let failures = 0;
    while (this.state === 'running') {
      let waitMs = this.options.pollIntervalMs;
      this.wakeSignal.take();
      try {
        await this.maintain();
        if (this.state !== 'running') break; // stop() began meanwhile: claim nothing more
        this.releaseStalePrefetched();
        this.startPrefetched();
        const free = this.freeSlots();
        const mark = this.wakeSignal.claimStarted();
        if (free > 0) {
          const want = free + Math.max(0, this.prefetchLimit() - this.prefetched.length);
          const { claimed, nextDueMs } = await this.claim(want);
          failures = 0;
          if (claimed === want) continue; // more may be waiting
          // A claim that took something says when the next step falls due; one that took nothing does not.
          const dueIn =
            claimed > 0
              ? nextDueMs
              : await msUntilNextDueStep(this.host.db, this.host.names, {
                  queues: this.options.queues,
                  activityNames: [...this.options.activities.keys()],
                });
          if (dueIn !== null) waitMs = Math.min(waitMs, Math.max(0, dueIn));
          if (dueIn !== null && dueIn <= 0 && claimed > 0) continue;
          // Eager dispatch hands workflow steps over without a claim: freed slots need not claim once drained.
          if (dueIn === null || dueIn > 0) this.wakeSignal.drainedSince(mark);
        }
      } catch (error) {
        failures++;
        waitMs = claimRetryDelayMs(this.options.pollIntervalMs, failures);
        logger.warn({ err: error, failures, class: classifyDatabaseError(error) }, 'worker:claim-failed');
        this.events.emit('worker:error', { error });
      }
      if (this.state !== 'running') break;
      await this.wakeSignal.sleep(waitMs);
    }
  }

  /** End expired steps that must not be retried, at most once per poll interval. */
  private async maintain(): Promise<void> {
    const now = monotonicNow();
    if (now - this.lastMaintenanceMs < this.options.pollIntervalMs) return;
    this.lastMaintenanceMs = now;
    await expireSteps(this.host.db, this.host.names);
    await this.settleAmbiguousClaims();
  }

  /** Release what an ambiguous claim took, if it committed (I15): never run a step claimed long ago. */
  private async settleAmbiguousClaims(): Promise<void> {
    while (this.unsettledClaims.length > 0) {
      const requestId = this.unsettledClaims[0] as string;
      const rows = await findClaimedByRequest(this.host.db, this.host.names, requestId);
      for (const r of rows) {
        try {
          await releaseStep(this.host.db, this.host.names, {
            runId: r.run_id,
            stepId: r.id,
            stepLabel: `${r.name}#${r.seq}`,
            attempt: r.attempt,
            token: BigInt(r.token),
            nonce: r.nonce,
            why: 'ambiguous-claim',
          });
        } catch (error) {
          this.host.logger.info({ err: error, step: r.id }, 'worker:ambiguous-claim-not-released');
        }
      }
      this.unsettledClaims.shift();
    }
  }

  private async claim(limit: number): Promise<{ claimed: number; nextDueMs: number | null }> {
    const claimRequestId = randomUUID();
    const sentAt = monotonicNow();
    let rows;
    try {
      const params = {
        workerId: this.workerId,
        claimRequestId,
        queues: this.options.queues,
        activityNames: [...this.options.activities.keys()],
        limit,
      };
      const pause = faultHooks['claim:before-commit'];
      rows = pause
        ? await this.host.db.transaction(async (tx) => {
            const claimed = await claimSteps(tx, this.host.names, params);
            if (claimed.length > 0) await pause(claimed.map((r) => ({ stepId: r.id, name: r.name })));
            return claimed;
          })
        : await claimSteps(this.host.db, this.host.names, params);
    } catch (error) {
      if (classifyDatabaseError(error) === 'transient') this.unsettledClaims.push(claimRequestId);
      throw error;
    }
    for (const row of rows) this.prefetched.push({ row, sentAt });
    this.startPrefetched('claimed');
    return { claimed: rows.length, nextDueMs: rows[0]?.next_due_ms ?? null };
  }

  /**
   * Run claimed steps, each in a slot; release one unstarted when its grant arrived too stale (I12) or after
   * stop() began.
   */
  private startAttempts(
    rows: readonly ClaimedStepRow[],
    sentAt: number,
    grant: 'claimed' | 'eager' | 'prefetched',
  ): void {
    for (const row of rows) {
      const definition = this.options.activities.get(row.name);
      const timing = this.options.timings.get(row.name);
      if (!definition || !timing) continue; // unreachable: the claim filters by our activity names
      const startedAt = monotonicNow();
      const attempt = new ActivityAttempt({
        row,
        definition,
        timing,
        claimSentAtMs: sentAt,
        services: {
          db: this.host.db,
          names: this.host.names,
          workerId: this.workerId,
          clockRateError: this.options.clockRateError,
          logger: this.host.logger,
          events: this.events,
          completions: this.completions,
          requestHeartbeat: () => this.heartbeats?.requestFlush(),
          codeSettled: () => {
            if (this.busy.delete(attempt)) this.slotFreed(monotonicNow() - startedAt);
          },
        },
      });
      this.events.emit('attempt:claimed', {
        attempt: attempt.ref,
        epoch: row.epoch,
        activity: row.name,
        grant,
      });
      this.active.add(attempt);
      this.busy.add(attempt);
      this.heartbeats?.add(attempt);
      const fresh = this.isFresh(row, sentAt);
      // A grant that arrives once stop() began (a claim or a turn's commit already in flight) is not run: it is
      // released at once, uncharged, for a worker that is not stopping.
      const unstarted = this.state !== 'running' ? 'shutdown' : fresh ? undefined : 'stale-grant';
      const execution = (unstarted ? attempt.releaseUnstarted(unstarted) : attempt.execute())
        .catch((error: unknown) => {
          this.host.logger.error({ err: error, step: row.id }, 'attempt:crashed');
          this.events.emit('worker:error', { error });
        })
        .finally(() => {
          this.active.delete(attempt);
          // Only code that ran and settled (codeSettled) tells how long attempts run: a grant released unstarted
          // (stale, ambiguous, or at stop) frees its slot at once, and counting it as a short run would make the
          // worker claim ahead of its slots just when it should not, taking steps from workers with free ones.
          this.busy.delete(attempt);
          this.heartbeats?.delete(attempt);
          this.executions.delete(execution);
          this.slotFreed(undefined);
        });
      this.executions.add(execution);
    }
  }

  /**
   * Start grants waiting for a slot in the slots free now (after stop() began: release them, unstarted); `grant`
   * is how `attempt:claimed` names them: `'claimed'` right after their claim, `'prefetched'` once they waited.
   */
  private startPrefetched(grant: 'claimed' | 'prefetched' = 'prefetched'): void {
    while (this.prefetched.length > 0 && (this.openSlots() > 0 || this.state !== 'running')) {
      const { row, sentAt } = this.prefetched.shift() as { row: ClaimedStepRow; sentAt: number };
      this.startAttempts([row], sentAt, grant);
    }
  }

  /**
   * Release the grants waiting for a slot that are no longer fresh enough to start (I12), at once rather than when
   * a slot frees: activities that ran short may have turned long, and a grant must not sit until its lease runs
   * out, holding its step back from other workers.
   */
  private releaseStalePrefetched(): void {
    for (const waiting of [...this.prefetched]) {
      if (this.isFresh(waiting.row, waiting.sentAt)) continue;
      this.prefetched.splice(this.prefetched.indexOf(waiting), 1);
      this.startAttempts([waiting.row], waiting.sentAt, 'prefetched'); // released unstarted: not fresh
    }
  }

  /** Whether a grant whose claim was sent at `sentAt` is fresh enough to start now (I12; see isGrantFresh). */
  private isFresh(row: ClaimedStepRow, sentAt: number): boolean {
    const timing = this.options.timings.get(row.name);
    if (!timing) return false; // unreachable: the claim filters by our activity names
    const settings = { clockRateError: this.options.clockRateError, safetyMarginMs: timing.safetyMarginMs };
    return isGrantFresh(
      localLeaseDeadline(sentAt, row.remaining_ms, settings),
      monotonicNow(),
      Math.min(row.lease_ms, row.start_to_close_timeout_ms),
      this.options.minGrantFreshness,
      settings,
    );
  }

  /**
   * How many grants to hold ahead of free slots now: one for each of the last `prefetch` attempts whose code ran
   * shorter than {@link PREFETCH_SHORT_MS}, so that a grant claimed ahead waits about that long at most, and a
   * worker whose activities run long claims only for its free slots.
   */
  private prefetchLimit(): number {
    return this.recentRuns.filter((short) => short).length;
  }

  /**
   * A slot freed — the code of an attempt ended after `ranMs`, or (undefined) an attempt ended otherwise (its
   * outcome recorded, or released unstarted), which may free one too: note how long the code ran (for
   * {@link prefetchLimit}), start a prefetched grant in the slot, wake the loop.
   */
  private slotFreed(ranMs: number | undefined): void {
    if (ranMs !== undefined && this.options.prefetch > 0) {
      this.recentRuns.push(ranMs < PREFETCH_SHORT_MS);
      if (this.recentRuns.length > this.options.prefetch) this.recentRuns.shift();
    }
    this.startPrefetched();
    this.wakeSignal.slotFreed();
  }

  /**
   * Eager dispatch: set aside up to `most` of the activity slots free now for a turn's commit, which may grant this worker the
   * steps it schedules ({@link EagerDispatchHost}); undefined when none is free or the worker is stopping.
   */
  private reserveDispatch(most: number): EagerDispatch | undefined {
    if (this.state !== 'running' || this.options.activities.size === 0) return undefined;
    const limit = Math.min(most, this.freeSlots());
    if (limit <= 0) return undefined;
    this.reservedSlots += limit;
    return {
      workerId: this.workerId,
      activityNames: [...this.options.activities.keys()],
      queues: this.options.queues,
      limit,
    };
  }

  private adoptDispatch(reserved: EagerDispatch, granted: readonly ClaimedStepRow[], sentAt: number): void {
    this.reservedSlots -= reserved.limit;
    this.startAttempts(granted, sentAt, 'eager');
    if (granted.length < reserved.limit) this.slotFreed(undefined); // a grant waiting for a slot may take it
  }

  /**
   * Eager start: set aside a turn slot for a start of workflow `workflowName` on `queue` in this process, when this
   * worker runs its turns and has one free (see EagerStartHost in client.ts); undefined otherwise.
   */
  reserveEagerStart(
    workflowName: string,
    queue: string,
  ): { readonly reserved: EagerTurns; adopt(granted: readonly ClaimedTurnRow[]): void } | undefined {
    const turns = this.turns;
    if (!turns || this.state !== 'running') return undefined;
    if (!this.options.workflows.has(workflowName) || !this.options.queues.includes(queue)) return undefined;
    const reserved = turns.reserve(1);
    return reserved && { reserved, adopt: (granted) => turns.adopt(reserved, granted) };
  }

  /**
   * Slots free for new attempts and not promised to a grant waiting for one (prefetch): see {@link openSlots}.
   */
  private freeSlots(): number {
    return this.openSlots() - this.prefetched.length;
  }

  /**
   * Slots free for new attempts: a slot frees when an attempt's code ends; its outcome is then recorded while the
   * slot runs the next one, so claims and completions overlap instead of taking turns, and the outcomes that end
   * while one statement records others go together in the next (up to {@link MAX_COMPLETION_BATCH} a statement).
   * Outcomes being recorded are bounded too, by `max(concurrency, MAX_COMPLETION_BATCH)`, and slots set aside for
   * a turn's commit (eager dispatch) are not free.
   */
  private openSlots(): number {
    const recording = Math.max(this.options.concurrency, MAX_COMPLETION_BATCH);
    return (
      Math.min(
        this.options.concurrency - this.busy.size,
        this.options.concurrency + recording - this.active.size,
      ) - this.reservedSlots
    );
  }

  /**
   * Stop: claim nothing more at once (what a claim already in flight returns is released unstarted, uncharged),
   * let running attempts finish for `graceMs`, then abort the rest with reason
   * `shutdown`; an attempt whose activity stops is released (fenced) so another worker can claim it at once,
   * one that ignores the signal keeps its lease until it expires. Then heartbeats stop, LISTEN ends and the
   * reserved connection is returned: no timers, listeners or connections are left behind.
   */
  async stop(options: StopOptions = {}): Promise<void> {
    const stop = resolveStopOptions(options);
    if (this.state === 'idle') {
      this.state = 'stopped';
      return;
    }
    if (this.state !== 'running') return;
    this.state = 'stopping';
    this.events.emit('worker:stopping', { workerId: this.workerId });
    this.host.logger.info({ workerId: this.workerId }, 'worker:stopping');
    this.wakeSignal.notify();
    await this.loop;
    this.startPrefetched();
    await this.turns?.stop();
    await this.retention?.stop();
    await this.unserved?.stop();
    await this.schedules?.stop();
    const graceMs = stop.graceMs ?? this.options.shutdownGraceMs;
    if (this.executions.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...this.executions]),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
      ]);
      clearTimeout(timer);
      for (const attempt of this.active)
        attempt.abort('shutdown', 'worker is stopping and its grace period ended');
      await Promise.allSettled([...this.executions]);
    }
    await this.heartbeats?.stop();
    await this.unlisten?.();
    await this.heartbeatConnection?.release();
    this.state = 'stopped';
    this.events.emit('worker:stopped', { workerId: this.workerId });
    this.host.logger.info({ workerId: this.workerId }, 'worker:stopped');
  }
}
