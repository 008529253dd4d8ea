import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { CompletionBatcher } from './completion-batcher.js';
import type { WorkerEvents } from './worker-events.js';

/** What an attempt needs from its worker. */
export interface AttemptServices {
  readonly db: Database;
  readonly names: SchemaNames;
  readonly workerId: string;
  readonly clockRateError: number;
  readonly logger: Logger;
  readonly events: WorkerEvents;
  /** Where completions and failures go: batched with the worker's other outcomes of the same kind. */
  readonly completions: CompletionBatcher;
  /** Ask the heartbeat loop to renew now (coalesced; at most one heartbeat in flight). */
  requestHeartbeat(): void;
  /**
   * The activity's code has returned or thrown: its concurrency slot may take the next attempt while this one's
   * outcome is being recorded (the attempt keeps its lease, and its heartbeats, until the record commits).
   */
  codeSettled?(): void;
}
