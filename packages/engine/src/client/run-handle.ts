import { z } from 'zod';
import { isTerminalRunStatus } from '../turn/state-machine.js';
import {
  CancelledFailure,
  PalisadeError,
  RunFailedError,
  RunNotFoundError,
  type Duration,
  type SerializedFailure,
  type SignalDefinition,
} from '@palisade/sdk';
import { echoed, checkText, durationMs, parseOptions } from '@palisade/sdk/internal';
import type { Database } from '../db/database.js';
import type { EndedRun, NotificationHub } from '../db/notification-hub.js';
import { readRun, readRunHistory, readChildRuns, type RunRow } from '../queries/read-run.js';
import { withInfraRetry } from '../infra-retry.js';
import { requestCancel } from '../queries/request-cancel.js';
import { readUnclaimedWork } from '../queries/unclaimed-work.js';
import { readSignals } from '../queries/send-signal.js';
import { readRunEventsAfter, WATCH_LATE_MS, WATCH_SETTLE_MS } from '../queries/watch-run.js';
import { readRunForWaiter } from '../queries/run-watchers.js';
import { signalPayload, signalRun } from './signal-run.js';
import type { Logger } from 'pino';
import { assertUsableOutsideTransaction } from '../db/fenced-scope.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { RunDetails, RunStatus, WatchedEvent } from './descriptions.js';
import { describeRunDetails, describeWatchedEvent } from './describe-run.js';
import { comparePositions, decodeCursor, encodeCursor } from './watch-cursor.js';
import { WatcherRow } from './watcher-row.js';

/** Options of {@link RunHandle.result}; durations as everywhere (ms, or `'2s'`), ≤ 2,147,483,647 ms. */
export interface ResultOptions {
  /** Give up after this long. @defaultValue no limit */
  readonly timeoutMs?: Duration;
  /** Re-read the run at least this often in case a NOTIFY was missed; ≥ 10 ms. @defaultValue 5_000 (ms) */
  readonly pollIntervalMs?: Duration;
}

const RESULT_DEFAULTS = Object.freeze({ pollIntervalMs: 5_000 });

/**
 * After how long due work that no worker has claimed is reported: in `describe().unclaimed`, in `runs show`, and
 * as a `run:unclaimed` warning from a `result()` still waiting (ms).
 */
export const UNCLAIMED_AFTER_MS = 60_000;

const resultSchema = z
  .object({
    timeoutMs: durationMs.optional(),
    pollIntervalMs: durationMs.pipe(z.number().min(10, 'must be ≥ 10 ms')).optional(),
  })
  .strict();

/** Options of {@link RunHandle.describe}. */
export interface DescribeOptions {
  /** Report work due and never claimed for at least this long. @defaultValue 60_000 (ms) */
  readonly unclaimedAfterMs?: Duration;
}

const describeSchema = z.object({ unclaimedAfterMs: durationMs.optional() }).strict();

/** Options of {@link RunHandle.watch}. */
export interface WatchOptions {
  /** Resume after this event: the `cursor` of an event an earlier watch yielded. @defaultValue the run's start */
  readonly after?: string;
  /** Re-read the run's events at least this often in case a NOTIFY was missed; ≥ 10 ms. @defaultValue 1_000 (ms) */
  readonly pollIntervalMs?: Duration;
}

const watchSchema = z
  .object({
    after: z.string().optional(),
    pollIntervalMs: durationMs.pipe(z.number().min(10, 'must be ≥ 10 ms')).optional(),
  })
  .strict();

/** How many events one read of a watch takes at most. */
const WATCH_PAGE = 500;
/** How soon a waiter reads again while a statement still in progress holds the run row (ms): see readRunForWaiter. */
const RUN_ROW_BUSY_MS = 25;

/** A reference to one run: wait for its result, describe it, cancel it. Cheap to create; holds no resources. */
export class RunHandle<O = unknown> {
  /**
   * @param created whether the call that made this handle created the run (`client.start` / `enqueue`); false for
   * a run that key already named, and for `getHandle` and `retry`.
   */
  constructor(
    readonly runId: string,
    private readonly db: Database,
    private readonly names: SchemaNames,
    private readonly hub: NotificationHub,
    private readonly logger?: Logger,
    readonly created = false,
  ) {}

  /** `{ runId, created }`: what `JSON.stringify(handle)` prints (not the engine's connections). */
  toJSON(): { readonly runId: string; readonly created: boolean } {
    return { runId: this.runId, created: this.created };
  }

  /**
   * Wait for the run to end and return its output. Wakes on the NOTIFY sent in the transaction that ends the
   * run, re-reading at most every `pollIntervalMs` as a fallback.
   * @throws RunFailedError when the run failed (its `failure` is the stored error).
   * @throws CancelledFailure when the run was cancelled.
   * @throws PalisadeError `RESULT_TIMEOUT` when `timeoutMs` passed first (the run goes on).
   * @throws PalisadeError `ENGINE_CLOSED` when the engine is closed while waiting (the run goes on).
   * @throws RunNotFoundError when there is no such run.
   */
  async result(options: ResultOptions = {}): Promise<O> {
    assertUsableOutsideTransaction(this.db, 'handle.result');
    const o = parseOptions(resultSchema, options, 'result options');
    const timeoutMs = o.timeoutMs;
    const pollIntervalMs = o.pollIntervalMs ?? RESULT_DEFAULTS.pollIntervalMs;
    const started = performance.now();
    let warnedUnclaimed = false;
    let wake: (() => void) | undefined;
    let notified = false;
    // The run's end, when this process committed it: no read needed.
    let endedHere: EndedRun | undefined;
    const watcher = new WatcherRow(this.db, this.names, this.runId, false);
    // Through an outage like every read here: LISTEN needs the database too.
    const unsubscribe = await withInfraRetry(() =>
      this.hub.subscribe(`run:${this.runId}`, (ended) => {
        notified = true;
        endedHere ??= ended;
        wake?.();
      }),
    );
    const throwIfClosed = () => {
      if (this.hub.closed) {
        throw new PalisadeError(
          'ENGINE_CLOSED',
          `engine closed while waiting for run ${echoed(this.runId)}; the run goes on (wait again on an open engine)`,
          { runId: this.runId },
        );
      }
    };
    try {
      // A turn of this run in progress in this process (an eager start's, say) may end it: its end then comes from
      // the commit, with no registration and no read.
      const localTurn = this.hub.localTurnsSettled(this.runId);
      if (localTurn) await localTurn;
      for (;;) {
        throwIfClosed();
        notified = false;
        // Registered first (a row of its own: the run row is never written), then read: a statement that ends the
        // run after the registration committed NOTIFYs; one that decided before is still writing the run row when
        // the read comes (`writing`), and the read is tried again once it ended.
        let run: RunRow | EndedRun | undefined = endedHere;
        let writing = false;
        if (!run) {
          const read = await withInfraRetry(async () => {
            throwIfClosed();
            await watcher.keep();
            return readRunForWaiter(this.db, this.names, this.runId);
          }).catch((error: unknown) => {
            throwIfClosed(); // the read failed because the engine closed its connections under it
            throw error;
          });
          run = read?.run;
          writing = read?.writing ?? false;
        }
        if (!run) throw new RunNotFoundError(`run ${echoed(this.runId)}`);
        if (run.status === 'completed') return run.output as O;
        if (run.status === 'failed') throw new RunFailedError(this.runId, run.error as SerializedFailure);
        if (run.status === 'cancelled') {
          throw new CancelledFailure(run.cancel_reason ?? 'cancelled', { runId: this.runId });
        }
        const left = timeoutMs === undefined ? Infinity : timeoutMs - (performance.now() - started);
        if (left <= 0) {
          throw new PalisadeError(
            'RESULT_TIMEOUT',
            `run ${echoed(this.runId)} is still ${run.status} after ${timeoutMs} ms; it goes on (call result() again)`,
            { runId: this.runId },
          );
        }
        if (!warnedUnclaimed && this.logger && performance.now() - started >= UNCLAIMED_AFTER_MS) {
          warnedUnclaimed = true;
          const unclaimed = await withInfraRetry(() =>
            readUnclaimedWork(this.db, this.names, this.runId, UNCLAIMED_AFTER_MS),
          );
          for (const u of unclaimed) {
            this.logger.warn(
              { runId: this.runId, kind: u.kind, name: u.name, queue: u.queue, dueForMs: u.dueForMs },
              'run:unclaimed',
            );
          }
        }
        if (notified) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, writing ? RUN_ROW_BUSY_MS : pollIntervalMs));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    } finally {
      unsubscribe();
      await watcher.drop();
    }
  }

  /**
   * The run, its steps (each with its attempts: epoch, token, worker, outcome, duration), its workflow turns'
   * attempts, its events, and work due for a while that no worker claimed (`unclaimed`).
   * @returns {@link RunDetails}: camelCase shapes with `Date`s, mapped from the rows in one place (describe-run.ts).
   * @throws RunNotFoundError when there is no such run.
   * @throws InvalidOptionsError naming a bad option.
   */
  async describe(options: DescribeOptions = {}): Promise<RunDetails> {
    assertUsableOutsideTransaction(this.db, 'handle.describe');
    const o = parseOptions(describeSchema, options, 'describe options');
    // Plain reads: one that meets a lost connection is tried again.
    const run = await withInfraRetry(() => readRun(this.db, this.names, this.runId));
    if (!run) throw new RunNotFoundError(`run ${echoed(this.runId)}`);
    const [history, unclaimed, signals, children] = await Promise.all([
      withInfraRetry(() => readRunHistory(this.db, this.names, this.runId)),
      withInfraRetry(() =>
        readUnclaimedWork(this.db, this.names, this.runId, o.unclaimedAfterMs ?? UNCLAIMED_AFTER_MS),
      ),
      withInfraRetry(() => readSignals(this.db, this.names, this.runId)),
      withInfraRetry(() => readChildRuns(this.db, this.names, this.runId)),
    ]);
    return describeRunDetails({ run, ...history, signals, children, unclaimed });
  }

  /**
   * The run's events as they happen, in the order of `describe().events` — steps scheduled, attempts claimed,
   * leases lost, stale writes rejected, signals waited for and received, progress (`run:progress`, its `data.value`
   * what `ctx.setProgress` set), the end — each once, each with a `cursor` to resume from (`{ after }`). Ends after
   * the run's end event; iterate with `for await` and `break` to stop early (nothing is held after it). Woken by the
   * NOTIFY of each turn's commit and of the run's end, re-reading every `pollIntervalMs` for the rest (claims and
   * heartbeats send none). An event is yielded once every transaction that could still write an earlier one has
   * ended (see readWatchHorizon): that holds order across concurrent writers.
   * @throws RunNotFoundError when there is no such run.
   * @throws InvalidOptionsError naming a bad option (a cursor not from a watch).
   * @throws PalisadeError `ENGINE_CLOSED` when the engine is closed while watching.
   */
  async *watch(options: WatchOptions = {}): AsyncGenerator<WatchedEvent, void, undefined> {
    assertUsableOutsideTransaction(this.db, 'handle.watch');
    const o = parseOptions(watchSchema, options, 'watch options');
    const from = o.after === undefined ? undefined : decodeCursor(this.runId, o.after);
    let after = from;
    const pollIntervalMs = o.pollIntervalMs ?? 1_000;
    let wake: (() => void) | undefined;
    let notified = false;
    const onNotify = () => {
      notified = true;
      wake?.();
    };
    const unsubscribers = await Promise.all([
      this.hub.subscribe(`run:${this.runId}`, onNotify),
      this.hub.subscribe(`watch:${this.runId}`, onNotify),
    ]);
    // Registered as a watcher (a row of its own): the run's turns and its end NOTIFY while it waits.
    const watcher = new WatcherRow(this.db, this.names, this.runId, true);
    // The events yielded within WATCH_LATE_MS before the furthest one, by id, with their times (µs).
    const seen = new Map<string, bigint>();
    try {
      for (;;) {
        if (this.hub.closed) {
          throw new PalisadeError('ENGINE_CLOSED', `engine closed while watching run ${echoed(this.runId)}`, {
            runId: this.runId,
          });
        }
        notified = false;
        await watcher.keep();
        if (after) {
          const lateFromUs = BigInt(after.atUs) - BigInt(WATCH_LATE_MS) * 1000n;
          for (const [id, atUs] of seen) if (atUs < lateFromUs) seen.delete(id);
        }
        const read = await readRunEventsAfter(this.db, this.names, this.runId, {
          from,
          after,
          seenIds: [...seen.keys()],
          limit: WATCH_PAGE,
        });
        for (const row of read.events) {
          const { at_us: atUs, rank, ord, ...event } = row;
          if (seen.has(row.id)) continue;
          seen.set(row.id, BigInt(atUs));
          const position = { atUs, rank, ord, id: row.id };
          // An event that became visible late sorts before ones already yielded: its cursor is still the furthest
          // place yielded, so that resuming from it yields nothing twice.
          if (!after || comparePositions(position, after) > 0) after = position;
          yield { ...describeWatchedEvent(event), cursor: encodeCursor(this.runId, after) };
        }
        if (read.events.length === WATCH_PAGE || notified) continue;
        if (read.status === undefined) throw new RunNotFoundError(`run ${echoed(this.runId)}`);
        // Ended, and every event up to its end (the end included) is before the horizon, hence yielded.
        const ended = isTerminalRunStatus(read.status) && read.finishedUs !== null;
        if (ended && BigInt(read.finishedUs!) < BigInt(read.horizonUs)) return;
        // Events (the end, say) past the horizon: read again once they are behind it. A statement still writing
        // the run row may have decided on its NOTIFY before this watch registered: read again once it ended.
        const delayMs = read.writing
          ? RUN_ROW_BUSY_MS
          : read.heldBack || ended
            ? WATCH_SETTLE_MS
            : pollIntervalMs;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, delayMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    } finally {
      for (const unsubscribe of unsubscribers) unsubscribe();
      await watcher.drop();
    }
  }

  /**
   * Send a signal to this workflow run (see {@link Client.signal}).
   * @returns the signal's id, its place in the order the run received its signals.
   * @throws ValidationError naming the payload field that fails the signal's schema; PalisadeError
   * `PAYLOAD_TOO_LARGE`; InvalidOptionsError when `signal` is not from defineSignal() or the run is not a workflow
   * run; RunNotFoundError; RunEndedError (`RUN_ENDED`) when the run has completed, failed or been cancelled.
   */
  async signal<P extends z.ZodType>(signal: SignalDefinition<P>, payload: z.input<P>): Promise<string> {
    assertUsableOutsideTransaction(this.db, 'handle.signal');
    const stored = signalPayload(signal, payload, 'handle.signal');
    return signalRun(this.db, this.names, { runId: this.runId, name: signal.name, payload: stored });
  }

  /**
   * Cancel the run. Its scheduled and running steps end `cancelled` at once; a running activity's holder learns
   * at its next heartbeat — its signal fires with reason `cancelled` and its later writes are refused with
   * `LeaseLostError` (reason `cancelled`). A standalone run ends `cancelled` here, and so does a workflow run no
   * turn has begun (pending and never claimed: none of its code ran — a child of a workflow no worker registers,
   * say; a parent awaiting it sees `ChildWorkflowFailure`); any other workflow run ends at its next turn, whose code
   * sees `CancelledFailure` and may still run cleanup steps. Legal any time; a no-op on a run that already ended
   * (its status is returned). Retried on a transient database error.
   * @returns the run's status as this call found it once it held the run's lock: `cancelled` when it ended the run
   * here, `pending` or `running` for a workflow run that ends at its next turn, or the status of a run that had
   * already ended.
   * @throws RunNotFoundError when there is no such run.
   * @throws InvalidOptionsError when `reason` is not storable text of at most 4,096 characters.
   */
  async cancel(reason = 'cancelled by request'): Promise<RunStatus> {
    assertUsableOutsideTransaction(this.db, 'handle.cancel');
    checkText(reason, 'cancel reason');
    // An id that is not a UUID names no run (the database would refuse the cast with a raw error).
    if (!/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(String(this.runId))) {
      throw new RunNotFoundError(`run ${echoed(this.runId)}`);
    }
    // Retried as a whole on a transient error (a connection lost mid-request, a lock timeout): the request is
    // idempotent (coalesce on the first request's time and reason), so it is applied exactly once.
    const status = await withInfraRetry(() =>
      requestCancel(this.db, this.names, { runId: this.runId, reason }),
    );
    if (status === undefined) throw new RunNotFoundError(`run ${echoed(this.runId)}`);
    return status as RunStatus;
  }
}
