export {
  ACTIVITY_DEFAULTS,
  MIN_LEASE_MS,
  defineActivity,
  fencingInfo,
  type ActivityContext,
  type ActivityDefinition,
  type ActivityInfo,
  type ActivityOptions,
  type FencedTransaction,
  type FencedTransactionRegistry,
  type FencingInfo,
} from './activity.js';
export {
  MAX_DURATION_MS,
  MAX_SLEEP_MS,
  durationMs,
  durationSchema,
  parseDuration,
  toMs,
  type Duration,
} from './duration.js';
export {
  concurrencyLimitSchema,
  rateLimitSchema,
  type ConcurrencyLimit,
  type RateLimit,
  type ResolvedRateLimit,
} from './flow-control.js';
export { MAX_INSTANT_MS, MIN_INSTANT_MS, instantProblem, instantSchema } from './instant.js';
export { MAX_PAYLOAD_DEPTH, jsonProblems, textProblem, type JsonProblem } from './json-value.js';
export { PAYLOAD_LIMITS, checkPayload, checkText } from './payload.js';
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
  ECHOED_CHARS,
  FAILURE_LIMITS,
  echoed,
  formatIssues,
  isPalisadeError,
  serializeFailure,
  storableFailure,
  type AbortReason,
  type ApplicationFailureOptions,
  type FencedOperation,
  type LeaseLostDetails,
  type PalisadeErrorCode,
  type PalisadeErrorContext,
  type PalisadeErrorOptions,
  type SerializedFailure,
} from './errors.js';
export {
  RETRY_DEFAULTS,
  mergeRetryPolicy,
  resolveRetryPolicy,
  retryDecision,
  type ResolvedRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';
export { validate } from './validate.js';
export { DEFINITION_NAME, definitionProblem } from './definition-check.js';
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
