import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
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
import { shorterLeaseMessage } from '../lease-override.js';
import { insertStandaloneRun } from '../queries/insert-standalone-run.js';
import { listRuns, readRun, type ListRunsFilter, type RunRow } from '../queries/read-run.js';
import { insertWorkflowRun } from '../queries/insert-workflow-run.js';
import { retryRun } from '../queries/retry-run.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { assertUsableOutsideTransaction } from '../worker/fenced-scope.js';
import { RunHandle } from './run-handle.js';

/** Options of {@link Client.enqueue}. */
export interface EnqueueOptions {
  /** Idempotency key: enqueueing again with the same key returns the existing run. */
  readonly key?: string;
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
  /** Idempotency key: starting again with the same key returns the existing run. */
  readonly key?: string;
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
   * @returns a handle to wait for the result (`handle.result()`), describe or cancel the run.
   * @throws ValidationError naming the bad input field, or the path of a value that would not survive the JSON
   * round trip into the database (a Date, BigInt, NaN, a NUL character…); PalisadeError `PAYLOAD_TOO_LARGE` when
   * the input is over `PAYLOAD_LIMITS.inputBytes`; InvalidOptionsError naming the bad option.
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
    const runId = randomUUID();
    const { runId: id } = await withInfraRetry(() =>
      insertStandaloneRun(this.db, this.names, {
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
      }),
    );
    return new RunHandle<z.output<O>>(id, this.db, this.names, this.hub, this.logger);
  }

  /**
   * Start a workflow run. Idempotent on `key`: the same key returns the existing run, whatever its state.
   * The input is checked against the workflow's schema here, before anything is stored.
   * @throws ValidationError naming the bad input field, or the path of a value that would not survive the JSON
   * round trip into the database; PalisadeError `PAYLOAD_TOO_LARGE`; InvalidOptionsError naming the bad option.
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
    const { runId } = await withInfraRetry(() =>
      insertWorkflowRun(this.db, this.names, {
        runId: id,
        workflowName: workflow.name,
        input: value,
        idempotencyKey: parsed.data.key ?? null,
        queue: parsed.data.queue ?? workflow.queue,
        priority: parsed.data.priority ?? 0,
      }),
    );
    return new RunHandle<z.output<O>>(runId, this.db, this.names, this.hub, this.logger);
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
