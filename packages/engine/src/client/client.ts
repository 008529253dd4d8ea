import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  PalisadeError,
  RunNotFoundError,
  checkPayload,
  durationMs,
  formatIssues,
  mergeRetryPolicy,
  textProblem,
  validate,
  type ActivityDefinition,
  type Duration,
  type RetryPolicy,
  type WorkflowDefinition,
} from '@palisade/sdk';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import type { NotificationHub } from '../db/notification-hub.js';
import { withInfraRetry } from '../infra-retry.js';
import { faultHooks } from '../internal/fault-points.js';
import { shorterLeaseMessage } from '../lease-override.js';
import { insertStandaloneRun } from '../queries/insert-standalone-run.js';
import { listRuns, readRun, type ListRunsFilter, type RunRow } from '../queries/read-run.js';
import { insertWorkflowRun } from '../queries/insert-workflow-run.js';
import { retryRun } from '../queries/retry-run.js';
import type { RunInsertOutcome } from '../queries/run-by-key.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { assertUsableOutsideTransaction } from '../worker/fenced-scope.js';
import { RunHandle } from './run-handle.js';

/**
 * The run a keyed start or enqueue names, or RUN_KEY_CONFLICT when the key already started a run with another
 * input and the caller did not ask to attach.
 */
function checkKeyOutcome(
  outcome: RunInsertOutcome,
  what: string,
  key: string | undefined,
  onConflict: OnKeyConflict | undefined,
): RunInsertOutcome {
  if (outcome.created || outcome.sameInput || onConflict === 'use-existing') return outcome;
  throw new PalisadeError(
    'RUN_KEY_CONFLICT',
    `${what}: key "${key ?? ''}" already started run ${outcome.runId} with a different input. ` +
      "Use another key for new work, or pass onConflict: 'use-existing' to get a handle to that run.",
    { runId: outcome.runId },
  );
}

/**
 * What a start or enqueue does when its idempotency key already started a run of the same workflow or activity
 * with a different input: `'fail'` throws `RUN_KEY_CONFLICT`; `'use-existing'` returns a handle to that run.
 * The same key with the same input always returns the existing run.
 */
export type OnKeyConflict = 'fail' | 'use-existing';

/** Options of {@link Client.enqueue}. */
export interface EnqueueOptions {
  /**
   * Idempotency key, scoped to this activity: enqueueing it again with the same input returns the existing run
   * (`handle.created` is false); with a different input see `onConflict`.
   */
  readonly key?: string;
  /** @defaultValue `'fail'` (RUN_KEY_CONFLICT) */
  readonly onConflict?: OnKeyConflict;
  /** @defaultValue the activity's queue */
  readonly queue?: string;
  /** Higher runs first. @defaultValue 0 */
  readonly priority?: number;
  /** Start no earlier than this long from now, by the database clock. @defaultValue 0 */
  readonly delayMs?: Duration;
  /** Overrides of the activity's retry policy, for this run. */
  readonly retry?: RetryPolicy;
  /** @defaultValue the activity's leaseMs */
  readonly leaseMs?: Duration;
  /** @defaultValue the activity's startToCloseTimeoutMs */
  readonly startToCloseTimeoutMs?: Duration;
}

/** Options of {@link Client.start}. */
export interface StartOptions {
  /**
   * Idempotency key, scoped to this workflow: starting it again with the same input returns the existing run
   * (`handle.created` is false); with a different input see `onConflict`.
   */
  readonly key?: string;
  /** @defaultValue `'fail'` (RUN_KEY_CONFLICT) */
  readonly onConflict?: OnKeyConflict;
  /** Queue its turns are claimed from. @defaultValue the workflow's queue */
  readonly queue?: string;
  /** Higher runs first; also the default priority of its steps. @defaultValue 0 */
  readonly priority?: number;
}

/** The options every run takes: its key, queue and priority. */
const runOptionsSchema = z
  .object({
    key: z
      .string()
      .min(1)
      .max(512)
      .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)')
      .optional(),
    queue: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1–128 letters, digits, _ . : -')
      .optional(),
    priority: z.number().int().min(-1000).max(1000).optional(),
    onConflict: z.enum(['fail', 'use-existing']).optional(),
  })
  .strict();

const startSchema = runOptionsSchema;

const enqueueSchema = runOptionsSchema
  .extend({
    delayMs: durationMs.optional(),
    retry: z.any().optional(),
    leaseMs: durationMs.optional(),
    startToCloseTimeoutMs: durationMs.pipe(z.number().min(1)).optional(),
  })
  .strict();

/** Refuse anything but a definition from defineActivity()/defineWorkflow() before reading its fields. */
function assertDefinition(definition: unknown, kind: 'activity' | 'workflow', call: string): void {
  if ((definition as { kind?: unknown } | null | undefined)?.kind === kind) return;
  throw new InvalidOptionsError(call, [
    {
      path: kind,
      message: `must be ${kind === 'activity' ? 'an activity from defineActivity()' : 'a workflow from defineWorkflow()'}`,
    },
  ]);
}

const listSchema = z
  .object({
    status: z.enum(['pending', 'running', 'completed', 'failed', 'cancelled']).optional(),
    name: z
      .string()
      .max(128)
      .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)')
      .optional(),
    limit: z
      .number()
      .int('must be a whole number')
      .min(1, 'must be ≥ 1')
      .max(10_000, 'must be ≤ 10,000')
      .optional(),
  })
  .strict();

/** Starts work and looks it up. Obtain it as `engine.client`. */
export class Client {
  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    private readonly hub: NotificationHub,
    private readonly logger?: Logger,
  ) {}

  /**
   * Run one activity on its own, without a workflow (a fenced job queue): the activity is claimed by a worker
   * serving it, with the same leases, fencing, retries and timeouts as inside a workflow.
   * The input is checked against the activity's schema here, before anything is stored.
   * Idempotent on `key` (scoped to this activity), as {@link Client.start}.
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
    assertUsableOutsideTransaction(this.db, 'client.enqueue');
    const parsed = enqueueSchema.safeParse(options);
    if (!parsed.success) {
      throw new InvalidOptionsError(`enqueue options of ${activity.name}`, formatIssues(parsed.error.issues));
    }
    const o = parsed.data;
    const value = validate(activity.input, input, `input of activity ${activity.name}`);
    checkPayload(value, `input of activity ${activity.name}`, PAYLOAD_LIMITS.inputBytes);
    const retryPolicy = mergeRetryPolicy(activity.retry, options.retry, `enqueue retry of ${activity.name}`);
    if (o.leaseMs !== undefined && o.leaseMs < activity.leaseMs) {
      throw new InvalidOptionsError(`enqueue options of ${activity.name}`, [
        { path: 'leaseMs', message: shorterLeaseMessage(activity.leaseMs, o.leaseMs) },
      ]);
    }
    const runId = randomUUID(); // fixed before the first try, so a retry after a lost reply cannot duplicate
    const outcome = await withInfraRetry(async () => {
      const inserted = await insertStandaloneRun(this.db, this.names, {
        runId,
        activityName: activity.name,
        input: value,
        idempotencyKey: o.key ?? null,
        queue: o.queue ?? activity.queue,
        priority: o.priority ?? 0,
        retryPolicy,
        leaseMs: o.leaseMs ?? activity.leaseMs,
        startToCloseTimeoutMs: o.startToCloseTimeoutMs ?? activity.startToCloseTimeoutMs,
        delayMs: o.delayMs ?? 0,
      });
      await faultHooks['client:after-insert-run']?.(inserted.runId);
      return inserted;
    });
    const { runId: id, created } = checkKeyOutcome(
      outcome,
      `enqueue of activity ${activity.name}`,
      o.key,
      o.onConflict,
    );
    return new RunHandle<z.output<O>>(id, this.db, this.names, this.hub, this.logger, created);
  }

  /**
   * Start a workflow run. Idempotent on `key` (scoped to this workflow): the same key with the same input returns
   * the existing run, whatever its state, and `handle.created` says whether this call created it (a call retried
   * after a lost reply still counts as the creator). The input is checked against the workflow's schema here,
   * before anything is stored.
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
    assertUsableOutsideTransaction(this.db, 'client.start');
    const parsed = startSchema.safeParse(options);
    if (!parsed.success) {
      throw new InvalidOptionsError(`start options of ${workflow.name}`, formatIssues(parsed.error.issues));
    }
    const value = validate(workflow.input, input, `input of workflow ${workflow.name}`);
    checkPayload(value, `input of workflow ${workflow.name}`, PAYLOAD_LIMITS.inputBytes);
    const id = randomUUID(); // fixed before the first try, so a retry after an unknown outcome cannot duplicate
    const outcome = await withInfraRetry(async () => {
      const inserted = await insertWorkflowRun(this.db, this.names, {
        runId: id,
        workflowName: workflow.name,
        input: value,
        idempotencyKey: parsed.data.key ?? null,
        queue: parsed.data.queue ?? workflow.queue,
        priority: parsed.data.priority ?? 0,
      });
      await faultHooks['client:after-insert-run']?.(inserted.runId);
      return inserted;
    });
    const { runId, created } = checkKeyOutcome(
      outcome,
      `start of workflow ${workflow.name}`,
      parsed.data.key,
      parsed.data.onConflict,
    );
    return new RunHandle<z.output<O>>(runId, this.db, this.names, this.hub, this.logger, created);
  }

  /** A handle to an existing run (not checked until used). */
  getHandle<O = unknown>(runId: string): RunHandle<O> {
    return new RunHandle<O>(runId, this.db, this.names, this.hub, this.logger);
  }

  /**
   * Runs, newest first (at most `limit`, default 50).
   * @throws InvalidOptionsError naming a bad filter field.
   */
  list(filter: ListRunsFilter = {}): Promise<RunRow[]> {
    try {
      assertUsableOutsideTransaction(this.db, 'client.list');
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    const parsed = listSchema.safeParse(filter);
    if (!parsed.success) {
      return Promise.reject(new InvalidOptionsError('list filter', formatIssues(parsed.error.issues)));
    }
    return listRuns(this.db, this.names, filter);
  }

  /**
   * Retry a `failed` or `cancelled` run from its recorded history: failed steps are scheduled again with a fresh
   * retry budget; tokens and epochs keep growing.
   * @throws RunNotFoundError when there is no such run; InvalidOptionsError when it is not failed or cancelled.
   */
  async retry(runId: string): Promise<RunHandle> {
    const run = await withInfraRetry(() => readRun(this.db, this.names, runId));
    if (!run) throw new RunNotFoundError(`run ${runId}`);
    // One statement, retried as a whole on a transient error (a deadlock cannot occur by the lock order, but a
    // dropped connection or a restart can): it applies at most once, since a retried run is no longer failed.
    if (!(await withInfraRetry(() => retryRun(this.db, this.names, runId)))) {
      throw new InvalidOptionsError('retry', [
        {
          path: 'runId',
          message: `run ${runId} is ${run.status}; only failed or cancelled runs can be retried`,
        },
      ]);
    }
    return this.getHandle(runId);
  }
}
