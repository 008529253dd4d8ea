/**
 * What the client's starting calls do before any statement: check the definition, the options and every input,
 * fix each run's id, split a bulk call into statements, resolve the options against the definition, and word a
 * key conflict.
 * @module
 */
import type { z } from 'zod';
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  PalisadeError,
  type ActivityDefinition,
  type RetryPolicy,
  type WorkflowDefinition,
} from '@palisade/sdk';
import { echoed, checkPayload, definitionProblem, mergeRetryPolicy, validate } from '@palisade/sdk/internal';
import { shorterLeaseMessage } from '../turn/context/lease-override.js';
import type { InsertStandaloneRunsParams } from '../queries/insert-standalone-run.js';
import type { InsertWorkflowRunsParams } from '../queries/insert-workflow-run.js';
import type { RunInsertOutcome, RunItem } from '../queries/run-by-key.js';
import { BULK_START_LIMITS, type enqueueManySchema, type startManySchema } from './start-options.js';
import { uuid7 } from '../turn/uuid7.js';

/** Refuse anything but a definition from defineActivity()/defineWorkflow() before reading its fields. */
export function assertDefinition(definition: unknown, kind: 'activity' | 'workflow', call: string): void {
  const problem = definitionProblem(definition, kind);
  if (!problem) return;
  throw new InvalidOptionsError(call, [
    { path: problem.path === '' ? kind : `${kind}.${problem.path}`, message: problem.message },
  ]);
}

/** @throws InvalidOptionsError when the inputs of a bulk call are not an array. */
export function assertInputs(inputs: unknown, where: string): void {
  if (!Array.isArray(inputs)) {
    throw new InvalidOptionsError(where, [
      { path: 'inputs', message: `must be an array, got ${typeof inputs}` },
    ]);
  }
}

/** @throws InvalidOptionsError when `keys` is given with another length than the inputs. */
export function assertKeys(keys: readonly unknown[] | undefined, inputs: number, where: string): void {
  if (keys !== undefined && keys.length !== inputs) {
    throw new InvalidOptionsError(where, [
      {
        path: 'keys',
        message: `must hold one key (or undefined) per input: ${inputs} inputs, ${keys.length} keys`,
      },
    ]);
  }
}

/**
 * The options and items of an `enqueueMany` / `startMany` call, everything checked before anything is stored:
 * `inputs` an array, the options (`parse`), `keys` as many as the inputs, each input against `input`.
 * @throws InvalidOptionsError naming `where`; ValidationError / PAYLOAD_TOO_LARGE naming `label(index)`.
 */
export function manyItems<O extends { readonly keys?: readonly (string | undefined)[] | undefined }>(
  parse: (where: string) => O,
  inputs: readonly unknown[],
  input: z.ZodType,
  at: { readonly where: string; readonly label: (index: number) => string },
): { o: O; items: RunItem[] } {
  assertInputs(inputs, at.where);
  const o = parse(at.where);
  assertKeys(o.keys, inputs.length, at.where);
  return { o, items: runItems(inputs, o.keys, input, at.label) };
}

/**
 * Check every input against `schema` and its JSON round trip, before anything is stored, and fix each run's id
 * (before the first try, so a retry after a lost reply cannot duplicate). `what(k)` names input `k` in errors.
 * @throws ValidationError or PalisadeError `PAYLOAD_TOO_LARGE` for the first bad input.
 */
export function runItems(
  inputs: readonly unknown[],
  keys: readonly (string | undefined)[] | undefined,
  schema: z.ZodType,
  what: (index: number) => string,
): RunItem[] {
  // Array.from, not map: a hole in a sparse array is an undefined input to check, not one to skip.
  return Array.from(inputs, (input, k) => {
    const value = validate(schema, input, what(k));
    return {
      runId: uuid7(),
      idempotencyKey: keys?.[k] ?? null,
      inputJson: checkPayload(value, what(k), PAYLOAD_LIMITS.inputBytes),
    };
  });
}

/** Split `items` into the statements of {@link BULK_START_LIMITS}; each holds at least one run. */
export function statementChunks(items: readonly RunItem[]): RunItem[][] {
  const chunks: RunItem[][] = [];
  let chunk: RunItem[] = [];
  let chars = 0;
  for (const item of items) {
    if (
      chunk.length > 0 &&
      (chunk.length >= BULK_START_LIMITS.runsPerStatement ||
        chars + item.inputJson.length > BULK_START_LIMITS.inputCharsPerStatement)
    ) {
      chunks.push(chunk);
      chunk = [];
      chars = 0;
    }
    chunk.push(item);
    chars += item.inputJson.length;
  }
  if (chunk.length > 0) chunks.push(chunk);
  return chunks;
}

/** The enqueue options resolved against the activity: every parameter of its runs but the items. */
export function enqueueParams(
  activity: ActivityDefinition<z.ZodType, z.ZodType>,
  o: z.output<typeof enqueueManySchema>,
  call: 'enqueue' | 'enqueueMany',
): Omit<InsertStandaloneRunsParams, 'items'> {
  const start = startTime(o, `${call} options of ${activity.name}`);
  const retryPolicy = mergeRetryPolicy(
    activity.retry,
    o.retry as RetryPolicy | undefined,
    `${call} retry of ${activity.name}`,
  );
  if (o.leaseMs !== undefined && o.leaseMs < activity.leaseMs) {
    throw new InvalidOptionsError(`${call} options of ${activity.name}`, [
      { path: 'leaseMs', message: shorterLeaseMessage(activity.leaseMs, o.leaseMs) },
    ]);
  }
  return {
    activityName: activity.name,
    queue: o.queue ?? activity.queue,
    priority: o.priority ?? 0,
    retryPolicy,
    leaseMs: o.leaseMs ?? activity.leaseMs,
    startToCloseTimeoutMs: o.startToCloseTimeoutMs ?? activity.startToCloseTimeoutMs,
    ...start,
    concurrency: o.concurrency,
    rateLimit: o.rateLimit ?? activity.rateLimit,
  };
}

/**
 * When the runs of a call start: `startAt` (epoch ms, or null) or a delay (ms) from the statement's DB time.
 * @throws InvalidOptionsError (`where`) when both `startAt` and `delayMs` are given.
 */
export function startTime(
  o: { readonly startAt?: Date | undefined; readonly delayMs?: number | undefined },
  where: string,
): { startAtMs: number | null; delayMs: number } {
  const delayMs = o.delayMs;
  if (o.startAt !== undefined && delayMs !== undefined) {
    throw new InvalidOptionsError(where, [
      { path: 'startAt', message: 'cannot be given with delayMs: give one of them' },
    ]);
  }
  return { startAtMs: o.startAt?.getTime() ?? null, delayMs: delayMs ?? 0 };
}

/** The start options resolved against the workflow: every parameter of its runs but the items. */
export function startParams(
  workflow: WorkflowDefinition<z.ZodType, z.ZodType>,
  o: z.output<typeof startManySchema>,
  where: string,
): Omit<InsertWorkflowRunsParams, 'items'> {
  return {
    workflowName: workflow.name,
    queue: o.queue ?? workflow.queue,
    priority: o.priority ?? 0,
    concurrency: o.concurrency,
    ...startTime(o, where),
  };
}

/**
 * RUN_KEY_CONFLICT for `items[at.index]`, whose key names a run with another input: an existing run (named, with
 * its `runId`), or — in a bulk call — the run an earlier item of the call was creating (`items[at.leadIndex]` of the
 * same statement, or one of an earlier statement). The call is all-or-nothing (see `insertRuns`): the refusal rolled
 * back every run of it.
 */
export function keyConflict(
  call: { what: string; many: boolean },
  items: readonly RunItem[],
  outcome: RunInsertOutcome,
  at: { index: number; leadIndex: number },
): PalisadeError {
  const key = echoed(items[at.index]?.idempotencyKey ?? '');
  if (!call.many) {
    return new PalisadeError(
      'RUN_KEY_CONFLICT',
      `${call.what}: key "${key}" already started run ${outcome.runId} with a different input. ` +
        "Use another key for new work, or pass onConflict: 'use-existing' to get a handle to that run.",
      { runId: outcome.runId },
    );
  }
  const unwritten = `Nothing of inputs[0..${items.length - 1}] was written.`;
  // The run the key names may be one an earlier statement of this call created: rolled back with the rest.
  const lead = outcome.createdHere ? at.leadIndex : items.findIndex((i) => i.runId === outcome.runId);
  if (lead >= 0) {
    return new PalisadeError(
      'RUN_KEY_CONFLICT',
      `${call.what}: inputs[${at.index}] has the key "${key}" of inputs[${lead}] with a different input. ` +
        `${unwritten} Give different work different keys, or pass onConflict: 'use-existing' to have ` +
        `inputs[${at.index}] name the run of inputs[${lead}].`,
    );
  }
  return new PalisadeError(
    'RUN_KEY_CONFLICT',
    `${call.what}: key "${key}" of inputs[${at.index}] already started run ${outcome.runId} with a different ` +
      `input. ${unwritten} Use another key for new work, or pass onConflict: 'use-existing' to get a handle ` +
      'to that run.',
    { runId: outcome.runId },
  );
}
