/** `ctx.run(activity, input, options)`: an activity call, a durable step, and the schema of its options. */
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  PalisadeError,
  type ActivityDefinition,
  type Duration,
  type RunActivityOptions,
} from '@palisade/sdk';
import {
  checkPayload,
  concurrencyLimitSchema,
  parseOptions,
  mergeRetryPolicy,
  rateLimitSchema,
  toMs,
  validate,
} from '@palisade/sdk/internal';
import { z } from 'zod';
import { never, type ReplayState } from '../replay-state.js';
import { shorterLeaseMessage } from './lease-override.js';

/** The per-call options of `ctx.run`; durations are checked where they are used ({@link toMs}). */
const runActivityOptionsSchema = z
  .object({
    retry: z.unknown().optional(),
    startToCloseTimeoutMs: z.unknown().optional(),
    leaseMs: z.unknown().optional(),
    queue: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1–128 letters, digits, _ . : -')
      .optional(),
    priority: z.number().int('must be a whole number').min(-1000).max(1000).optional(),
    concurrency: concurrencyLimitSchema.optional(),
    rateLimit: rateLimitSchema.optional(),
  })
  .strict();

/** A per-call lease may lengthen the activity's lease, never shorten it (see {@link shorterLeaseMessage}). */
function overrideLease(activity: ActivityDefinition, leaseMs: Duration | undefined): number {
  if (leaseMs === undefined) return activity.leaseMs;
  const ms = toMs(leaseMs, `leaseMs of ctx.run(${activity.name})`);
  if (ms < activity.leaseMs) {
    throw new InvalidOptionsError(`ctx.run options of ${activity.name}`, [
      { path: 'leaseMs', message: shorterLeaseMessage(activity.leaseMs, ms) },
    ]);
  }
  return ms;
}

/**
 * `ctx.run`: the activity's output once its step completes (recorded: at once, on replay). Something that is not
 * an activity fails the run (`INVALID_OPTIONS`); bad options throw {@link InvalidOptionsError} at the call; the
 * input is validated and copied when the step is scheduled (`ValidationError`, `PAYLOAD_TOO_LARGE`).
 */
export function runActivity<O>(
  state: ReplayState,
  activity: ActivityDefinition,
  input: unknown,
  options: RunActivityOptions = {},
): Promise<O> {
  const { workflowName, runId } = state;
  if (!activity || activity.kind !== 'activity') {
    state.fatal ??= new PalisadeError(
      'INVALID_OPTIONS',
      `workflow ${workflowName} called ctx.run with something that is not an activity from defineActivity()`,
    );
    return never<O>();
  }
  const o = parseOptions(
    runActivityOptionsSchema,
    options,
    `ctx.run options of ${activity.name} in workflow ${workflowName}`,
  );
  const inputOf = (seq: number): unknown => {
    const what = `input of activity ${activity.name} (step ${seq} of ${workflowName})`;
    const checked: unknown = validate(activity.input, input, what);
    // A copy, as it is at the call: the code may change the object before the turn commits.
    return JSON.parse(checkPayload(checked, what, PAYLOAD_LIMITS.inputBytes, { runId }));
  };
  return state.durable<O>('activity', activity.name, (seq) => ({
    seq,
    kind: 'activity',
    name: activity.name,
    input: inputOf(seq),
    queue: options.queue ?? activity.queue,
    priority: options.priority ?? state.current.priority,
    retryPolicy: mergeRetryPolicy(activity.retry, options.retry, `retry of ${activity.name}`),
    leaseMs: overrideLease(activity, options.leaseMs),
    startToCloseTimeoutMs:
      options.startToCloseTimeoutMs !== undefined
        ? toMs(options.startToCloseTimeoutMs, `startToCloseTimeoutMs of ctx.run(${activity.name})`)
        : activity.startToCloseTimeoutMs,
    concurrency: o.concurrency,
    rateLimit: o.rateLimit ?? activity.rateLimit,
  }));
}
