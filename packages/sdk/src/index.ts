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
export { durationMs, parseDuration, toMs, type Duration } from './duration.js';
export {
  ActivityFailure,
  ApplicationFailure,
  AttemptAbortedError,
  CancelledFailure,
  InvalidOptionsError,
  LeaseLostError,
  NonDeterminismError,
  PalisadeError,
  RunFailedError,
  RunNotFoundError,
  ValidationError,
  formatIssues,
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
export {
  RETRY_DEFAULTS,
  mergeRetryPolicy,
  resolveRetryPolicy,
  retryDecision,
  type ResolvedRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';
export { validate } from './validate.js';
export {
  defineWorkflow,
  type RunActivityOptions,
  type WorkflowContext,
  type WorkflowDefinition,
  type WorkflowInfo,
  type WorkflowOptions,
} from './workflow.js';
