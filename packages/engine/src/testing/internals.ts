/**
 * Engine internals for tests: the statements of the attempt state machine (DESIGN.md §4) and the worker's
 * completion batcher, so that integration tests can drive one claim, heartbeat, fence, completion, failure or
 * expiry at a time and check each fence on its own. Exported as `@palisade/engine/testing/internals` so that tests
 * never import `packages/engine/src/...` by path.
 *
 * Not a public API: no stability promise, and calling these beside a running worker bypasses its bookkeeping
 * (local deadlines, heartbeats, abort signals). Each function takes the engine's `Database` and `SchemaNames`
 * (`engine.database`, `engine.names`) and documents its own predicate, locks and errors where it is defined.
 * Never import this from production code.
 * @module
 */
export { claimSteps, type ClaimStepsParams, type ClaimedStepRow } from '../queries/claim-steps.js';
export { claimTurns, type ClaimTurnsParams, type ClaimedTurnRow } from '../queries/claim-turns.js';
export {
  completeStep,
  completeSteps,
  type CompleteStepParams,
  type CompletedBatch,
} from '../queries/complete-step.js';
export { expireSteps, type ExpiredStepRow } from '../queries/expire-steps.js';
export { failStep, failSteps, type FailStepParams } from '../queries/fail-step.js';
export { releaseStep, type ReleaseStepParams } from '../queries/release-step.js';
export { fenceStep } from '../queries/fence-step.js';
export { rotateReady, type ReadyRotation, type RotateReadyParams } from '../queries/rotate-ready.js';
export { analyzeStaleTables } from '../queries/analyze-stale-tables.js';
export type { AttemptRef } from '../queries/fenced-outcome.js';
export { heartbeatSteps, type HeartbeatEntry, type HeartbeatResultRow } from '../queries/heartbeat-steps.js';
export { CompletionBatcher, MAX_COMPLETION_BATCH } from '../worker/completion-batcher.js';
