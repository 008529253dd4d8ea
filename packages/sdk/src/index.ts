/**
 * `@palisade/sdk`: what workflow and activity code imports — definitions, contexts, failures, retry policy,
 * durations. Engine-only helpers live in `@palisade/sdk/internal`.
 * @packageDocumentation
 */
export {
  ACTIVITY_DEFAULTS,
  MIN_LEASE_MS,
  defineActivity,
  type ActivityContext,
  type ActivityDefinition,
  type ActivityInfo,
  type ActivityOptions,
  type FencedTransaction,
  type FencedTransactionRegistry,
  type FencingInfo,
} from './activity.js';
export { MAX_DURATION_MS, MAX_SLEEP_MS, parseDuration, type Duration } from './duration.js';
export { type ConcurrencyLimit, type RateLimit } from './flow-control.js';
export { MAX_INSTANT_MS, MIN_INSTANT_MS } from './instant.js';

export { PAYLOAD_LIMITS } from './payload.js';
export {
  ActivityFailure,
  ChildWorkflowFailure,
  ApplicationFailure,
  AttemptAbortedError,
  CancelledFailure,
  InvalidOptionsError,
  LeaseLostError,
  NonDeterminismError,
  PalisadeError,
  RunEndedError,
  RunFailedError,
  RunNotFoundError,
  ValidationError,
  FAILURE_LIMITS,
  isPalisadeError,
  serializeFailure,
  type AbortReason,
  type ApplicationFailureOptions,
  type FencedOperation,
  type LeaseLostDetails,
  type PalisadeErrorCode,
  type PalisadeErrorContext,
  type PalisadeErrorOptions,
  type SerializedFailure,
} from './errors.js';
export { RETRY_DEFAULTS, type RetryPolicy } from './retry-policy.js';

export { defineSignal, type SignalDefinition, type SignalOptions, type SignalWait } from './signal.js';
export {
  defineWorkflow,
  type RunActivityOptions,
  type RunChildOptions,
  type WaitForSignalOptions,
  type WorkflowContext,
  type WorkflowDefinition,
  type WorkflowInfo,
  type WorkflowOptions,
} from './workflow.js';
