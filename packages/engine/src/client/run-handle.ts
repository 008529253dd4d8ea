import { z } from 'zod';
import {
  echoed,
  CancelledFailure,
  InvalidOptionsError,
  PalisadeError,
  RunFailedError,
  RunNotFoundError,
  checkText,
  durationMs,
  formatIssues,
  type Duration,
  type SerializedFailure,
  type SignalDefinition,
} from '@palisade/sdk';
import type { Database } from '../db/database.js';
import type { EndedRun, NotificationHub } from '../db/notification-hub.js';
import {
  readRun,
  registerResultWaiter,
  registerWatcher,
  readRunHistory,
  readChildRuns,
  type AttemptRow,
  type ChildRunRow,
  type EventRow,
  type RunRow,
  type StepRow,
} from '../queries/read-run.js';
import { withInfraRetry } from '../infra-retry.js';
import { requestCancel } from '../queries/request-cancel.js';
import { readUnclaimedWork, type UnclaimedWork } from '../queries/unclaimed-work.js';
import { readSignals, type SignalRow } from '../queries/send-signal.js';
import {
  readRunEventsAfter,
  readWatchHorizon,
  type WatchPosition,
  type WatchedEventRow,
} from '../queries/watch-run.js';
import { signalPayload, signalRun } from './signal-run.js';
import type { Logger } from 'pino';
import { assertUsableOutsideTransaction } from '../worker/fenced-scope.js';
import type { SchemaNames } from '../queries/schema-names.js';

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

/** A run's current state with its steps, attempts and history, as `describe()` returns it. */
export interface RunDescription {
  readonly run: RunRow;
  /** The run's steps in position order (retired ones too, with `retired_at`), each with its attempts. */
  readonly steps: readonly (StepRow & { readonly attempts: readonly AttemptRow[] })[];
  /** The attempts of a workflow run's turns (`kind: 'turn'`, no step), oldest first; empty for activity runs. */
  readonly turns: readonly AttemptRow[];
  readonly events: readonly EventRow[];
  /** Signals sent to the run, in arrival order: pending ones (`step_id` null) and those a wait took. */
  readonly signals: readonly SignalRow[];
  /** The runs this one started with `ctx.runChild`, oldest first (its parent: `run.parent_run_id`). */
  readonly children: readonly ChildRunRow[];
  /**
   * Work due for at least {@link UNCLAIMED_AFTER_MS} (or the `unclaimedAfterMs` given) that no worker ever
   * claimed: most likely no live worker serves that activity or workflow on that queue.
   */
  readonly unclaimed: readonly UnclaimedWork[];
}

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

/** An event as {@link RunHandle.watch} yields it. */
export interface WatchedEvent extends EventRow {
  /** The name of the step the event is about, or null for the run's own events (`run:*`, turn events). */
  readonly step_name: string | null;
  /** Pass as `watch({ after })` to resume right after this event. Opaque. */
  readonly cursor: string;
}

const watchSchema = z
  .object({
    after: z.string().optional(),
    pollIntervalMs: durationMs.pipe(z.number().min(10, 'must be ≥ 10 ms')).optional(),
  })
  .strict();

/** How many events one read of a watch takes at most. */
const WATCH_PAGE = 500;
/** How soon a watch reads again while an open transaction holds its horizon back (ms). */
const WATCH_HELD_BACK_MS = 25;
const RUN_ENDINGS = new Set(['completed', 'failed', 'cancelled']);

/** `w1.<run id, hex>.<at µs>.<rank>.<ord>.<id>`: a place in one run's history (see readRunEventsAfter). */
function encodeCursor(runId: string, e: WatchedEventRow): string {
  return `w1.${runId.replaceAll('-', '')}.${e.at_us}.${e.rank}.${e.ord}.${e.id}`;
}

function decodeCursor(runId: string, cursor: string): WatchPosition {
  const m = /^w1\.([0-9a-f]{32})\.(-?\d{1,19})\.(\d{1,2})\.(-?\d{1,19})\.(\S{1,80})$/.exec(cursor);
  if (!m) {
    throw new InvalidOptionsError('watch options', [
      { path: 'after', message: `is not a cursor from an event watch() yielded: ${echoed(cursor)}` },
    ]);
  }
  if (m[1] !== runId.replaceAll('-', '').toLowerCase()) {
    throw new InvalidOptionsError('watch options', [
      { path: 'after', message: `is a cursor of another run's events, not of run ${echoed(runId)}` },
    ]);
  }
  return { atUs: m[2]!, rank: Number(m[3]), ord: m[4]!, id: m[5]! };
}

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
    const parsed = resultSchema.safeParse(options);
    if (!parsed.success) throw new InvalidOptionsError('result options', formatIssues(parsed.error.issues));
    const timeoutMs = parsed.data.timeoutMs;
    const pollIntervalMs = parsed.data.pollIntervalMs ?? RESULT_DEFAULTS.pollIntervalMs;
    const started = performance.now();
    let warnedUnclaimed = false;
    let wake: (() => void) | undefined;
    let notified = false;
    // The run's end, when this process committed it: no read needed.
    let endedHere: EndedRun | undefined;
    const unsubscribe = await this.hub.subscribe(`run:${this.runId}`, (ended) => {
      notified = true;
      endedHere ??= ended;
      wake?.();
    });
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
      // the commit, with no registration (a write on the run row, which that commit would wait for) and no read.
      const localTurn = this.hub.localTurnsSettled(this.runId);
      if (localTurn) await localTurn;
      for (let read = 0; ; read++) {
        throwIfClosed();
        notified = false;
        // The first read registers this waiter on the run, so that the statement ending it NOTIFYs.
        // A read that meets a lost connection is tried again (a registration counted twice only costs a NOTIFY).
        const run =
          endedHere ??
          (await withInfraRetry(() => {
            throwIfClosed();
            return (read === 0 ? registerResultWaiter : readRun)(this.db, this.names, this.runId);
          }).catch((error: unknown) => {
            throwIfClosed(); // the read failed because the engine closed its connections under it
            throw error;
          }));
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
          const unclaimed = await readUnclaimedWork(this.db, this.names, this.runId, UNCLAIMED_AFTER_MS);
          for (const u of unclaimed) {
            this.logger.warn(
              { runId: this.runId, kind: u.kind, name: u.name, queue: u.queue, dueForMs: u.dueForMs },
              'run:unclaimed',
            );
          }
        }
        if (notified) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(left, pollIntervalMs));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    } finally {
      unsubscribe();
    }
  }

  /**
   * The run, its steps (each with its attempts: epoch, token, worker, outcome, duration), its workflow turns'
   * attempts, its events, and work due for a while that no worker claimed (`unclaimed`).
   * @throws RunNotFoundError when there is no such run.
   * @throws InvalidOptionsError naming a bad option.
   */
  async describe(options: DescribeOptions = {}): Promise<RunDescription> {
    assertUsableOutsideTransaction(this.db, 'handle.describe');
    const parsed = describeSchema.safeParse(options);
    if (!parsed.success) throw new InvalidOptionsError('describe options', formatIssues(parsed.error.issues));
    // Plain reads: one that meets a lost connection is tried again.
    const run = await withInfraRetry(() => readRun(this.db, this.names, this.runId));
    if (!run) throw new RunNotFoundError(`run ${echoed(this.runId)}`);
    const [history, unclaimed, signals, children] = await Promise.all([
      withInfraRetry(() => readRunHistory(this.db, this.names, this.runId)),
      withInfraRetry(() =>
        readUnclaimedWork(
          this.db,
          this.names,
          this.runId,
          parsed.data.unclaimedAfterMs ?? UNCLAIMED_AFTER_MS,
        ),
      ),
      withInfraRetry(() => readSignals(this.db, this.names, this.runId)),
      withInfraRetry(() => readChildRuns(this.db, this.names, this.runId)),
    ]);
    return {
      run,
      steps: history.steps.map((s) => ({
        ...s,
        attempts: history.attempts.filter((a) => a.step_id === s.id),
      })),
      turns: history.attempts.filter((a) => a.step_id === null),
      events: history.events,
      signals,
      children,
      unclaimed,
    };
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
    const parsed = watchSchema.safeParse(options);
    if (!parsed.success) throw new InvalidOptionsError('watch options', formatIssues(parsed.error.issues));
    let after = parsed.data.after === undefined ? undefined : decodeCursor(this.runId, parsed.data.after);
    const pollIntervalMs = parsed.data.pollIntervalMs ?? 1_000;
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
    try {
      // Registered as a watcher: the run's turns and its end then NOTIFY (see commitTurn).
      if (!(await registerWatcher(this.db, this.names, this.runId))) {
        throw new RunNotFoundError(`run ${echoed(this.runId)}`);
      }
      for (;;) {
        if (this.hub.closed) {
          throw new PalisadeError('ENGINE_CLOSED', `engine closed while watching run ${echoed(this.runId)}`, {
            runId: this.runId,
          });
        }
        notified = false;
        const horizonUs = await readWatchHorizon(this.db, this.names);
        const read = await readRunEventsAfter(this.db, this.names, this.runId, after, horizonUs, WATCH_PAGE);
        for (const row of read.events) {
          const { at_us: _at, rank: _rank, ord: _ord, ...event } = row;
          yield { ...event, cursor: encodeCursor(this.runId, row) };
        }
        const last = read.events.at(-1);
        if (last) after = { atUs: last.at_us, rank: last.rank, ord: last.ord, id: last.id };
        if (read.events.length === WATCH_PAGE || notified) continue;
        if (read.status === undefined) throw new RunNotFoundError(`run ${echoed(this.runId)}`);
        // Ended, and every event up to its end (the end included) is below the horizon, hence yielded.
        const ended = RUN_ENDINGS.has(read.status) && read.finishedUs !== null;
        if (ended && BigInt(read.finishedUs!) < BigInt(horizonUs)) return;
        // Events (the end, say) past the horizon: read again soon, once the transactions open before them ended.
        const heldBack = read.heldBack || ended;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, heldBack ? WATCH_HELD_BACK_MS : pollIntervalMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    } finally {
      for (const unsubscribe of unsubscribers) unsubscribe();
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
   * `LeaseLostError` (reason `cancelled`). A standalone run ends `cancelled` here; a workflow run at its next turn,
   * whose code sees `CancelledFailure` and may still run cleanup steps. Legal any time; a no-op on a run that
   * already ended (its status is returned). Retried on a transient database error.
   * @throws RunNotFoundError when there is no such run.
   * @throws InvalidOptionsError when `reason` is not storable text of at most 4,096 characters.
   */
  async cancel(reason = 'cancelled by request'): Promise<string> {
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
    return status;
  }
}
