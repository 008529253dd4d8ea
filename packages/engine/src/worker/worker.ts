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
import { CompletionBatcher } from './completion-batcher.js';
import { expireSteps } from '../queries/expire-steps.js';
import { msUntilNextDueStep } from '../queries/next-due-step.js';
import { notificationItems } from '../db/notification-payload.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { TurnLoop } from './turn-loop.js';
import { ActivityAttempt } from './activity-attempt.js';
import { ActivitySlots } from './activity-slots.js';
import { AmbiguousClaims } from './ambiguous-claims.js';
import { BackgroundTasks } from './background-tasks.js';
import { HeartbeatLoop } from './heartbeat-loop.js';
import { isGrantFresh, localLeaseDeadline, monotonicNow } from './lease-clock.js';
import { WakeSignal, claimRetryDelayMs } from './wake-signal.js';
import { WorkerEvents } from './worker-events.js';
import type { CompleteStepParams, EagerTurns, StepPosition } from '../queries/complete-step.js';
import type { ClaimedTurnRow } from '../queries/claim-turns.js';
import type { LocalResults } from '../db/notification-hub.js';

export type { StopOptions } from '../options.js';

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
 * due time, and ends expired steps that must not be retried; with the engine's `retentionMs`, it also deletes
 * finished runs past it, in the background, and (unless `schedules: false`) it fires the due ticks of schedules. No global state: many workers (and engines) can
 * live in one process.
 */
export class Worker {
  readonly options: ResolvedWorkerOptions;
  readonly events = new WorkerEvents();
  /** The activity slots: attempts held and running, slots set aside, grants claimed ahead. */
  private readonly slots: ActivitySlots;
  private readonly executions = new Set<Promise<void>>();
  private heartbeats: HeartbeatLoop | undefined;
  private turns: TurnLoop | undefined;
  private background: BackgroundTasks | undefined;
  private heartbeatConnection: (Database & { release(): Promise<void> }) | undefined;
  private unlisten: (() => Promise<void>) | undefined;
  private state: 'idle' | 'running' | 'stopping' | 'stopped' = 'idle';
  private readonly wakeSignal = new WakeSignal();
  private loop: Promise<void> | undefined;
  private lastMaintenanceMs = 0;
  private readonly ambiguousClaims: AmbiguousClaims;
  private readonly completions: CompletionBatcher;

  constructor(
    private readonly host: WorkerHost,
    options: WorkerOptions,
  ) {
    const defaultId = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.options = resolveWorkerOptions(options, defaultId);
    this.slots = new ActivitySlots(this.options);
    this.ambiguousClaims = new AmbiguousClaims(host);
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
    return this.slots.active.size;
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
    this.background = new BackgroundTasks({
      db,
      names,
      logger,
      events: this.events,
      options: this.options,
      retentionMs: this.host.retentionMs,
    });
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
        const free = this.slots.free();
        const mark = this.wakeSignal.claimStarted();
        if (free > 0) {
          const want = free + Math.max(0, this.slots.prefetchLimit() - this.slots.prefetched.length);
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
    await this.ambiguousClaims.settle();
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
      if (classifyDatabaseError(error) === 'transient') this.ambiguousClaims.add(claimRequestId);
      throw error;
    }
    for (const row of rows) this.slots.prefetched.push({ row, sentAt });
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
            if (this.slots.busy.delete(attempt)) this.slotFreed(monotonicNow() - startedAt);
          },
        },
      });
      this.events.emit('attempt:claimed', {
        attempt: attempt.ref,
        epoch: row.epoch,
        activity: row.name,
        grant,
      });
      this.slots.active.add(attempt);
      this.slots.busy.add(attempt);
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
          this.slots.active.delete(attempt);
          // Only code that ran and settled (codeSettled) tells how long attempts run: a grant released unstarted
          // (stale, ambiguous, or at stop) frees its slot at once, and counting it as a short run would make the
          // worker claim ahead of its slots just when it should not, taking steps from workers with free ones.
          this.slots.busy.delete(attempt);
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
    while (this.slots.prefetched.length > 0 && (this.slots.open() > 0 || this.state !== 'running')) {
      const { row, sentAt } = this.slots.prefetched.shift() as { row: ClaimedStepRow; sentAt: number };
      this.startAttempts([row], sentAt, grant);
    }
  }

  /**
   * Release the grants waiting for a slot that are no longer fresh enough to start (I12), at once rather than when
   * a slot frees: activities that ran short may have turned long, and a grant must not sit until its lease runs
   * out, holding its step back from other workers.
   */
  private releaseStalePrefetched(): void {
    for (const waiting of [...this.slots.prefetched]) {
      if (this.isFresh(waiting.row, waiting.sentAt)) continue;
      this.slots.prefetched.splice(this.slots.prefetched.indexOf(waiting), 1);
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
   * A slot freed — the code of an attempt ended after `ranMs`, or (undefined) an attempt ended otherwise (its
   * outcome recorded, or released unstarted), which may free one too: note how long the code ran (for
   * {@link ActivitySlots.prefetchLimit}), start a prefetched grant in the slot, wake the loop.
   */
  private slotFreed(ranMs: number | undefined): void {
    if (ranMs !== undefined) this.slots.codeRan(ranMs);
    this.startPrefetched();
    this.wakeSignal.slotFreed();
  }

  /**
   * Eager dispatch: set aside up to `most` of the activity slots free now for a turn's commit, which may grant this worker the
   * steps it schedules ({@link EagerDispatchHost}); undefined when none is free or the worker is stopping.
   */
  private reserveDispatch(most: number): EagerDispatch | undefined {
    if (this.state !== 'running' || this.options.activities.size === 0) return undefined;
    const limit = this.slots.reserve(most);
    if (limit <= 0) return undefined;
    return {
      workerId: this.workerId,
      activityNames: [...this.options.activities.keys()],
      queues: this.options.queues,
      limit,
    };
  }

  private adoptDispatch(reserved: EagerDispatch, granted: readonly ClaimedStepRow[], sentAt: number): void {
    this.slots.unreserve(reserved.limit);
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
    // The turn loop stops taking turns now, not once the claim loop has ended: a completion statement in flight
    // may claim an eager turn for this worker meanwhile, and a stopping worker hands that back unstarted.
    const turnsStopped = this.turns?.stop();
    await this.loop;
    this.startPrefetched();
    await turnsStopped;
    await this.background?.stop();
    const graceMs = stop.graceMs ?? this.options.shutdownGraceMs;
    if (this.executions.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...this.executions]),
        new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs))),
      ]);
      clearTimeout(timer);
      for (const attempt of this.slots.active)
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
