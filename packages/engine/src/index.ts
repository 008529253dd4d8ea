/**
 * `@palisade/engine`: the runtime — `createEngine`, its client (start, enqueue, describe, signal, cancel), workers,
 * schedules, migrations and the fenced-resource helper. Runs, steps and attempts come back as the documented
 * camelCase shapes of `client/descriptions.ts`.
 * @packageDocumentation
 */
import type { AnyPgDatabase } from './db/database.js';

declare module '@palisade/sdk' {
  /** Inside `ctx.fencedTransaction(fn)`, `fn` receives the engine's drizzle transaction. */
  interface FencedTransactionRegistry {
    transaction: AnyPgDatabase;
  }
}

export { Client } from './client/client.js';
export {
  BULK_START_LIMITS,
  type EnqueueManyOptions,
  type EnqueueOptions,
  type OnKeyConflict,
  type StartManyOptions,
  type StartOptions,
} from './client/start-options.js';
export type {
  CallerTransactionLike,
  DrizzleTransactionLike,
  PgliteTransactionLike,
  PostgresJsTransactionLike,
} from './client/caller-transaction-like.js';
export {
  RunHandle,
  UNCLAIMED_AFTER_MS,
  type DescribeOptions,
  type ResultOptions,
  type WatchOptions,
} from './client/run-handle.js';
export type {
  AttemptDescription,
  AttemptOutcome,
  ChildRunDescription,
  ConcurrencyDescription,
  EventDescription,
  RateLimitDescription,
  RunDescription,
  RunDetails,
  RunEndStatus,
  RunStatus,
  SignalDescription,
  StepDescription,
  StepKind,
  StepStatus,
  UndeliveredSignal,
  WatchedEvent,
} from './client/descriptions.js';
export type { UnclaimedWork } from './queries/unclaimed-work.js';
/** Re-exported from `@palisade/sdk` (the same objects), for code that catches the engine's errors. */
export { PalisadeError, isPalisadeError } from '@palisade/sdk';
export type { AnyPgDatabase, Database } from './db/database.js';
export { poolReconnectBackoffSeconds as reconnectBackoffSeconds } from './db/database.js';
export { openEmbeddedDatabase, type EmbeddedDatabase } from './db/embedded-database.js';
export { createEngine, type CreateEngineOptions, type Engine } from './engine.js';
export {
  createFencedResource,
  type FencedResource,
  type FencedResourceOptions,
  type FencingToken,
} from './fenced-resource.js';
export {
  classifyDatabaseError,
  withInfraRetry,
  type ErrorClass,
  type InfraRetryOptions,
} from './infra-retry.js';
export type { PostgresJsClient } from './db/client-shapes.js';
export { loadMigrations, migrate, type MigrateResult, type Migration } from './migrate.js';
export {
  ENGINE_DEFAULTS,
  WORKER_DEFAULTS,
  MAX_RETENTION_MS,
  MIN_RETENTION_MS,
  RETENTION_SWEEP_INTERVAL_MS,
  resolveSchemaName,
  type EngineOptions,
  type PruneOptions,
  type ResolvedEngineOptions,
  type ResolvedWorkerOptions,
  type WorkerOptions,
} from './options.js';
export type { ListRunsFilter } from './queries/read-run.js';
export {
  Schedules,
  type BackfillResult,
  type Schedule,
  type ScheduleCatchup,
  type ScheduleDescription,
  type ScheduleOptions,
  type ScheduleOverlap,
  type SchedulePatch,
} from './schedules/schedules.js';
export { SCHEDULE_BATCH_SIZE, type ScheduleEvaluation } from './schedules/evaluate-schedules.js';
export { MAX_BACKFILL_TICKS, MAX_CATCHUP_TICKS, ON_TIME_MS } from './schedules/schedule-ticks.js';
export { PRUNE_BATCH_SIZE, type PruneResult, type PrunedCounts } from './retention.js';
export { Worker, type StopOptions } from './worker/worker.js';
export { WorkerEvents, type WorkerEventMap } from './worker/worker-events.js';
