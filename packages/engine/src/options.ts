/**
 * The engine's options, one file per call that takes them (`options/`): what `createEngine`, `engine.worker`,
 * `worker.stop` / `engine.close` and `engine.pruneRuns` accept, each parsed once into a frozen resolved form with
 * its defaults filled. This entry re-exports them, so importers need not know the files.
 */
export {
  ENGINE_DEFAULTS,
  MAX_POOL_SIZE,
  MAX_RETENTION_MS,
  MIN_RETENTION_MS,
  resolveEngineOptions,
  resolveSchemaName,
  type EngineEnvironment,
  type EngineOptions,
  type ResolvedEngineOptions,
} from './options/engine-options.js';
export {
  resolvePruneOptions,
  type PruneOptions,
  type ResolvedPruneOptions,
} from './options/prune-options.js';
export { resolveStopOptions, type StopOptions } from './options/stop-options.js';
export {
  WORKER_DEFAULTS,
  RETENTION_SWEEP_INTERVAL_MS,
  READY_ROTATION_INTERVAL_MS,
  READY_ROTATION_MIN_BYTES,
  TABLE_ANALYZE_CHECK_INTERVAL_MS,
  resolveWorkerOptions,
  type ActivityTiming,
  type ResolvedWorkerOptions,
  type WorkerOptions,
} from './options/worker-options.js';
