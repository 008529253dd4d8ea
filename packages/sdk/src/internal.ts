/**
 * `@palisade/sdk/internal`: helpers the engine shares with the SDK — input, payload and option checks, the zod
 * schemas behind the public option types, failure serialization and retry arithmetic. Not for workflow or activity
 * code: their names and shapes may change in any release. What users need is exported from `@palisade/sdk`.
 * @packageDocumentation
 */
export { fencingInfo } from './activity.js';
export { durationMs, durationSchema, toMs } from './duration.js';
export { concurrencyLimitSchema, rateLimitSchema, type ResolvedRateLimit } from './flow-control.js';
export { instantProblem, instantSchema } from './instant.js';
export { MAX_PAYLOAD_DEPTH, jsonProblems, textProblem, type JsonProblem } from './json-value.js';
export { checkPayload, checkText } from './payload.js';
export { ECHOED_CHARS, echoed, formatIssues, storableFailure } from './errors.js';
export type { ParsedOptions } from './renamed-options.js';
export {
  mergeRetryPolicy,
  resolveRetryPolicy,
  retryDecision,
  type ResolvedRetryPolicy,
} from './retry-policy.js';
export { parseOptions, validate } from './validate.js';
export { DEFINITION_NAME, definitionProblem } from './definition-check.js';
