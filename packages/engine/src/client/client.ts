import type { z } from 'zod';
import {
  InvalidOptionsError,
  RunNotFoundError,
  type ActivityDefinition,
  type SignalDefinition,
  type WorkflowDefinition,
} from '@palisade/sdk';
import { echoed, parseOptions } from '@palisade/sdk/internal';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import { callerTransaction, type CallerTransaction } from '../db/caller-transaction.js';
import type { NotificationHub } from '../db/notification-hub.js';
import { withInfraRetry } from '../infra-retry.js';
import { faultHooks } from '../internal/fault-points.js';
import { insertStandaloneRuns } from '../queries/insert-standalone-run.js';
import { listRuns, type ListRunsFilter } from '../queries/read-run.js';
import { insertWorkflowRuns } from '../queries/insert-workflow-run.js';
import { retryRun } from '../queries/retry-run.js';
import type { RunItem } from '../queries/run-by-key.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { assertUsableOutsideTransaction } from '../db/fenced-scope.js';
import type { ClaimedTurnRow } from '../queries/claim-turns.js';
import type { EagerTurns } from '../queries/complete-step.js';
import type { CallerTransactionLike } from './caller-transaction-like.js';
import type { RunDescription } from './descriptions.js';
import { describeRun } from './describe-run.js';
import { insertRuns, type RunInserter } from './insert-runs.js';
import { RunHandle } from './run-handle.js';
import { assertDefinition, enqueueParams, manyItems, runItems, startParams } from './run-items.js';
import { signalPayload, signalRun, signalRunIn } from './signal-run.js';
import {
  enqueueManySchema,
  enqueueSchema,
  listSchema,
  startManySchema,
  startSchema,
  type EnqueueManyOptions,
  type EnqueueOptions,
  type OnKeyConflict,
  type StartManyOptions,
  type StartOptions,
} from './start-options.js';
import { uuid7 } from '../turn/uuid7.js';

/**
 * Eager start: a worker of this engine that runs turns of workflow `workflowName` on `queue` and has a turn slot
 * free sets it aside (`reserved`) for a start's statement, which grants it the new run's first turn; `adopt`
 * starts what the statement granted (or nothing) and frees the slot — called once, whatever the statement did.
 */
export type EagerStartHost = (
  workflowName: string,
  queue: string,
) => { readonly reserved: EagerTurns; adopt(granted: readonly ClaimedTurnRow[]): void } | undefined;

/** Starts work and looks it up. Obtain it as `engine.client`. */
export class Client {
  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    private readonly hub: NotificationHub,
    private readonly logger?: Logger,
    /** The engine's workers, for eager starts (none: every first turn is claimed). */
    private readonly eagerStart?: EagerStartHost,
  ) {}

  /**
   * Run one activity on its own, without a workflow (a fenced job queue): the activity is claimed by a worker
   * serving it, with the same leases, fencing, retries and timeouts as inside a workflow.
   * The input is checked against the activity's schema here, before anything is stored.
   * Idempotent on `key` (scoped to this activity), as {@link Client.start}. For many runs at once see
   * {@link Client.enqueueMany}.
   * @returns a handle to wait for the result (`handle.result()`), describe or cancel the run; `handle.created`
   * says whether this call created it.
   * @throws ValidationError naming the bad input field, or the path of a value that would not survive the JSON
   * round trip into the database (a Date, BigInt, NaN, a NUL character…); PalisadeError `PAYLOAD_TOO_LARGE` when
   * the input is over `PAYLOAD_LIMITS.inputBytes`; InvalidOptionsError naming the bad option.
   * @throws PalisadeError `RUN_KEY_CONFLICT` (with the existing `runId`) when the key already started a run of
   * this activity with a different input, unless `onConflict: 'use-existing'`.
   */
  async enqueue<I extends z.ZodType, O extends z.ZodType>(
    activity: ActivityDefinition<I, O>,
    input: z.input<I>,
    options: EnqueueOptions = {},
  ): Promise<RunHandle<z.output<O>>> {
    assertDefinition(activity, 'activity', 'enqueue');
    const where = `enqueue options of ${activity.name}`;
    const o = parseOptions(enqueueSchema, options, where);
    const tx = this.transactionOf(o.tx, where, 'client.enqueue');
    const items = runItems([input], [o.key], activity.input, () => `input of activity ${activity.name}`);
    const params = enqueueParams(activity, o, 'enqueue');
    const [handle] = await this.insertRuns<z.output<O>>(
      items,
      o.onConflict,
      (db, chunk) => insertStandaloneRuns(db, this.names, { ...params, items: chunk }),
      { what: `enqueue of activity ${activity.name}`, many: false, tx },
    );
    if (!handle) throw new Error(`enqueue of activity ${activity.name} returned no run`);
    return handle;
  }

  /**
   * Enqueue many runs of one activity, as {@link Client.enqueue} would one by one but in one statement per
   * {@link BULK_START_LIMITS}`.runsPerStatement` (1,000) runs, with one NOTIFY per statement. `options` apply to
   * every run; `keys` gives each input its own idempotency key. Every input is checked against the activity's
   * schema before anything is stored, so a bad input writes nothing. A key behaves as for `enqueue`, within the
   * batch too: an input whose key an earlier input (or an existing run of this activity) took names that run
   * (`created` false) when its input is equal, and otherwise is RUN_KEY_CONFLICT unless
   * `onConflict: 'use-existing'`.
   * Atomicity: the call is all-or-nothing. A call over more than 1,000 inputs runs several statements, in one
   * transaction (with `tx`, one savepoint of it), so an error in any of them leaves nothing of the call written and
   * the call is safe to retry whole.
   * @param inputs - one input per run; an empty array returns `[]` without touching the database.
   * @returns one handle per input, in input order (several handles name the same run when keys repeat).
   * @throws ValidationError naming the bad input by its index (`inputs[3] of activity charge is invalid: …`) and
   * field; PalisadeError `PAYLOAD_TOO_LARGE` naming the index; InvalidOptionsError naming the bad option (or
   * `keys` of another length than `inputs`).
   * @throws PalisadeError `RUN_KEY_CONFLICT` naming the index (and the existing `runId` when the key belongs to an
   * existing run) when a key names a run with a different input, unless `onConflict: 'use-existing'`; nothing of
   * the call is written.
   */
  async enqueueMany<I extends z.ZodType, O extends z.ZodType>(
    activity: ActivityDefinition<I, O>,
    inputs: readonly z.input<I>[],
    options: EnqueueManyOptions = {},
  ): Promise<RunHandle<z.output<O>>[]> {
    assertDefinition(activity, 'activity', 'enqueueMany');
    const { o, items } = manyItems(
      (where) => parseOptions(enqueueManySchema, options, where),
      inputs,
      activity.input,
      {
        where: `enqueueMany options of ${activity.name}`,
        label: (k) => `inputs[${k}] of activity ${activity.name}`,
      },
    );
    const tx = this.transactionOf(o.tx, `enqueueMany options of ${activity.name}`, 'client.enqueueMany');
    const params = enqueueParams(activity, o, 'enqueueMany');
    return this.insertRuns<z.output<O>>(
      items,
      o.onConflict,
      (db, chunk) => insertStandaloneRuns(db, this.names, { ...params, items: chunk }),
      { what: `enqueueMany of activity ${activity.name}`, many: true, tx },
    );
  }

  /**
   * Start a workflow run. Idempotent on `key` (scoped to this workflow): the same key with the same input returns
   * the existing run, whatever its state, and `handle.created` says whether this call created it (a call retried
   * after a lost reply still counts as the creator). The input is checked against the workflow's schema here,
   * before anything is stored. For many runs at once see {@link Client.startMany}.
   * @throws ValidationError naming the bad input field, or the path of a value that would not survive the JSON
   * round trip into the database; PalisadeError `PAYLOAD_TOO_LARGE`; InvalidOptionsError naming the bad option.
   * @throws PalisadeError `RUN_KEY_CONFLICT` (with the existing `runId`) when the key already started a run of
   * this workflow with a different input, unless `onConflict: 'use-existing'`.
   */
  async start<I extends z.ZodType, O extends z.ZodType>(
    workflow: WorkflowDefinition<I, O>,
    input: z.input<I>,
    options: StartOptions = {},
  ): Promise<RunHandle<z.output<O>>> {
    assertDefinition(workflow, 'workflow', 'start');
    return this.startRun(workflow, input, options, `start options of ${workflow.name}`);
  }

  /** {@link Client.start} of a checked definition; `where` names the call's options in errors. */
  private async startRun<I extends z.ZodType, O extends z.ZodType>(
    workflow: WorkflowDefinition<I, O>,
    input: z.input<I>,
    options: StartOptions,
    where: string,
  ): Promise<RunHandle<z.output<O>>> {
    const o = parseOptions(startSchema, options, where);
    const tx = this.transactionOf(o.tx, where, 'client.start');
    const items = runItems([input], [o.key], workflow.input, () => `input of workflow ${workflow.name}`);
    const params = startParams(workflow, o, where);
    // Eager start: when a worker of this engine runs this workflow's turns and has a slot free, the statement
    // that creates the run grants it the first turn, which starts at once: no NOTIFY, no claim. Never inside the
    // caller's transaction (the worker would run a turn of a run that may never commit, and could not see it),
    // nor for a delayed start (its first turn is not due), nor for a run with a concurrency key (its first turn
    // waits for a place, which only a claim grants).
    const delayed = params.startAtMs !== null || params.delayMs > 0;
    const host = tx || delayed || o.concurrency ? undefined : this.eagerStart?.(workflow.name, params.queue);
    let granted: ClaimedTurnRow[] = [];
    try {
      const [handle] = await this.insertRuns<z.output<O>>(
        items,
        o.onConflict,
        async (db, chunk) => {
          const inserted = await insertWorkflowRuns(db, this.names, {
            ...params,
            items: chunk,
            ...(host ? { eager: host.reserved } : {}),
          });
          granted = inserted.eagerTurns;
          return inserted.outcomes;
        },
        { what: `start of workflow ${workflow.name}`, many: false, tx },
      );
      if (!handle) throw new Error(`start of workflow ${workflow.name} returned no run`);
      return handle;
    } finally {
      host?.adopt(granted);
    }
  }

  /**
   * Start many runs of one workflow, as {@link Client.start} would one by one but in one statement per
   * {@link BULK_START_LIMITS}`.runsPerStatement` (1,000) runs, with one NOTIFY per statement. `options` apply to
   * every run; `keys` gives each input its own idempotency key, with the semantics of
   * {@link Client.enqueueMany} (within the batch too). Every input is checked against the workflow's schema
   * before anything is stored, so a bad input writes nothing. The call is all-or-nothing, as
   * {@link Client.enqueueMany} is: its statements run in one transaction.
   * @param inputs - one input per run; an empty array returns `[]` without touching the database.
   * @returns one handle per input, in input order (several handles name the same run when keys repeat).
   * @throws ValidationError naming the bad input by its index and field; PalisadeError `PAYLOAD_TOO_LARGE`;
   * InvalidOptionsError naming the bad option (or `keys` of another length than `inputs`).
   * @throws PalisadeError `RUN_KEY_CONFLICT` naming the index (and the existing `runId`) when a key names a run
   * with a different input, unless `onConflict: 'use-existing'`; nothing of the call is written.
   */
  async startMany<I extends z.ZodType, O extends z.ZodType>(
    workflow: WorkflowDefinition<I, O>,
    inputs: readonly z.input<I>[],
    options: StartManyOptions = {},
  ): Promise<RunHandle<z.output<O>>[]> {
    assertDefinition(workflow, 'workflow', 'startMany');
    const { o, items } = manyItems(
      (where) => parseOptions(startManySchema, options, where),
      inputs,
      workflow.input,
      {
        where: `startMany options of ${workflow.name}`,
        label: (k) => `inputs[${k}] of workflow ${workflow.name}`,
      },
    );
    const where = `startMany options of ${workflow.name}`;
    const tx = this.transactionOf(o.tx, where, 'client.startMany');
    const params = startParams(workflow, o, where);
    return this.insertRuns<z.output<O>>(
      items,
      o.onConflict,
      async (db, chunk) => (await insertWorkflowRuns(db, this.names, { ...params, items: chunk })).outcomes,
      { what: `startMany of workflow ${workflow.name}`, many: true, tx },
    );
  }

  /**
   * The caller's transaction given as `tx`, checked and wrapped; or, without one, undefined once checked that the
   * engine's database is usable here (`what` names the call).
   * @throws InvalidOptionsError naming `tx` (see {@link callerTransaction}); PalisadeError
   * `FENCED_TRANSACTION_NESTED` without `tx` inside a fenced transaction on PGlite.
   */
  private transactionOf(tx: unknown, where: string, what: string): CallerTransaction | undefined {
    if (tx === undefined) {
      assertUsableOutsideTransaction(this.db, what);
      return undefined;
    }
    return callerTransaction(
      tx,
      { driver: this.db.driver, schema: this.names.schema, database: this.db },
      where,
    );
  }

  /** {@link insertRuns} on this engine's database, one handle per item in order. */
  private async insertRuns<O>(
    items: readonly RunItem[],
    onConflict: OnKeyConflict | undefined,
    insert: RunInserter,
    call: { what: string; many: boolean; tx: CallerTransaction | undefined },
  ): Promise<RunHandle<O>[]> {
    const outcomes = await insertRuns(this.db, items, onConflict, insert, call);
    return outcomes.map(
      (o) => new RunHandle<O>(o.runId, this.db, this.names, this.hub, this.logger, o.created),
    );
  }

  /**
   * Send a signal to workflow run `runId`: durable once this returns (a retry after a lost reply stores it once).
   * The run keeps it, in arrival order, until its code takes it with `ctx.waitForSignal(signal)` — at once if a wait
   * for it is pending (the run is woken by NOTIFY), else at the next wait. A signal no wait takes is recorded
   * undelivered, with why, and shown by `describe()` and `palisade runs show`: a wait whose schema refuses the
   * payload (sent with another version of the schema) goes on waiting without it, and the run's end marks every
   * signal still pending. Legal outside a fenced transaction.
   * @returns the signal's id, its place in the order the run received its signals.
   * @throws ValidationError naming the payload field that fails the signal's schema; PalisadeError
   * `PAYLOAD_TOO_LARGE` over `PAYLOAD_LIMITS.inputBytes`; InvalidOptionsError when `signal` is not from
   * defineSignal() or the run is a standalone activity run; RunNotFoundError when there is no such run;
   * RunEndedError (`RUN_ENDED`, with the run's `status`) when it has completed, failed or been cancelled.
   */
  async signal<P extends z.ZodType>(
    runId: string,
    signal: SignalDefinition<P>,
    payload: z.input<P>,
  ): Promise<string> {
    assertUsableOutsideTransaction(this.db, 'client.signal');
    const stored = signalPayload(signal, payload, 'client.signal');
    return signalRun(this.db, this.names, { runId, name: signal.name, payload: stored });
  }

  /**
   * Signal the run of `workflow` that `options.key` names, starting it with `input` first if no run has that key
   * (Temporal's signal-with-start), in one transaction: the run exists with the signal, or not at all. The start is
   * {@link Client.start} with `onConflict: 'use-existing'` by default, so a second call with the same key signals
   * the same run again; the payload is checked before anything is stored, so a bad payload starts nothing.
   * @returns a handle to the run (`handle.created` says whether this call started it).
   * @throws InvalidOptionsError when `options.key` is missing, or `options.tx` is given (a signal-with-start does not
   * take the caller's transaction), or as {@link Client.start} and {@link Client.signal};
   * RunEndedError (`RUN_ENDED`) when the key names a run that has ended (a key names one run until it is pruned).
   */
  async signalWithStart<I extends z.ZodType, O extends z.ZodType, P extends z.ZodType>(
    workflow: WorkflowDefinition<I, O>,
    input: z.input<I>,
    signal: SignalDefinition<P>,
    payload: z.input<P>,
    options: Omit<StartOptions, 'tx'> & { readonly key: string },
  ): Promise<RunHandle<z.output<O>>> {
    assertUsableOutsideTransaction(this.db, 'client.signalWithStart');
    assertDefinition(workflow, 'workflow', 'signalWithStart');
    const where = `signalWithStart options of ${workflow.name}`;
    const stored = signalPayload(signal, payload, 'client.signalWithStart');
    if (typeof options?.key !== 'string') {
      throw new InvalidOptionsError(where, [
        { path: 'key', message: 'is required: it names the run to signal or start' },
      ]);
    }
    // The signal goes on the engine's connection: a start in the caller's transaction beside it would leave a
    // signal whose run may never commit.
    if ((options as StartOptions).tx !== undefined) {
      throw new InvalidOptionsError(where, [
        {
          path: 'tx',
          message: 'is not supported by signalWithStart: call start with { tx }, and signal after the commit',
        },
      ]);
    }
    // Checked before the transaction opens (and again by the start in it), under this call's name.
    parseOptions(startSchema, options, where);
    // One transaction: the run is started (or found by its key) and signalled, or neither — a run started without
    // the signal it was started for would wait for it for ever. Retried whole on a transient error: the key finds
    // the run a lost reply created, and the request id stores the signal once.
    const requestId = uuid7();
    return withInfraRetry(() =>
      this.db.transaction(async (tx) => {
        const handle = await this.startRun(
          workflow,
          input,
          {
            onConflict: 'use-existing',
            ...options,
            // The engine's own drizzle transaction: a PgTransaction at run time, typed as its database.
            tx: tx.drizzle as unknown as CallerTransactionLike,
          },
          where,
        );
        await faultHooks['client:signal-with-start:before-signal']?.(handle.runId);
        await signalRunIn(tx, this.names, {
          runId: handle.runId,
          name: signal.name,
          payload: stored,
          requestId,
        });
        return handle;
      }),
    );
  }

  /** A handle to an existing run (not checked until used). */
  getHandle<O = unknown>(runId: string): RunHandle<O> {
    return new RunHandle<O>(runId, this.db, this.names, this.hub, this.logger);
  }

  /**
   * Runs, newest first (at most `limit`, default 50; 1–10,000), filtered by `status` and workflow or activity
   * `name`. Plain read; legal outside a fenced transaction.
   * @returns each run as a {@link RunDescription} (camelCase, `Date`s), without its steps: `getHandle(id).describe()`
   * has those.
   * @throws InvalidOptionsError naming a bad filter field.
   */
  list(filter: ListRunsFilter = {}): Promise<RunDescription[]> {
    try {
      assertUsableOutsideTransaction(this.db, 'client.list');
      parseOptions(listSchema, filter, 'list filter');
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    return listRuns(this.db, this.names, filter).then((rows) => rows.map(describeRun));
  }

  /**
   * Retry a `failed` or `cancelled` run from its recorded history: failed steps are scheduled again with a fresh
   * retry budget; tokens and epochs keep growing.
   * @throws RunNotFoundError when there is no such run; InvalidOptionsError when it is not failed or cancelled.
   */
  async retry(runId: string): Promise<RunHandle> {
    // One transaction, retried as a whole on a transient error (a deadlock cannot occur by the lock order, but a
    // dropped connection or a restart can): it applies at most once, since a retried run is no longer failed.
    // What it reports is the run as it was once its lock was held, not as read before a wait on that lock (a
    // run a prune deleted meanwhile is not found; one retried meanwhile is pending).
    const retried = await withInfraRetry(() => retryRun(this.db, this.names, String(runId)));
    if (!retried) throw new RunNotFoundError(`run ${echoed(String(runId))}`);
    if (!retried.retried) {
      throw new InvalidOptionsError('retry', [
        {
          path: 'runId',
          message: `run ${echoed(String(runId))} is ${retried.status}; only failed or cancelled runs can be retried`,
        },
      ]);
    }
    return this.getHandle(runId);
  }
}
