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

/**
 * @internal Engine-only helpers, also exported from `@palisade/sdk/internal` (their home): kept here until every
 * engine import has moved there, then removed. Not for workflow or activity code.
 */
export {
  DEFINITION_NAME,
  ECHOED_CHARS,
  MAX_PAYLOAD_DEPTH,
  checkPayload,
  checkText,
  concurrencyLimitSchema,
  definitionProblem,
  durationMs,
  durationSchema,
  echoed,
  fencingInfo,
  formatIssues,
  instantProblem,
  instantSchema,
  jsonProblems,
  mergeRetryPolicy,
  rateLimitSchema,
  resolveRetryPolicy,
  retryDecision,
  storableFailure,
  textProblem,
  toMs,
  validate,
  type JsonProblem,
  type ResolvedRateLimit,
  type ResolvedRetryPolicy,
} from './internal.js';
