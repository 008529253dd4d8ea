/**
 * What the pieces of the worker's turn loop share: its options, where eager dispatch goes, the loop's parts a
 * turn runs with ({@link TurnLoopParts}), and how a turn is named to the commit, the fault points and the events.
 */
import type { WorkflowDefinition } from '@palisade/sdk';
import type { Logger } from 'pino';
import type { Database } from '../db/database.js';
import type { LocalResults } from '../db/notification-hub.js';
import type { TurnFault } from '../internal/fault-points.js';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import type { ClaimedTurnRow } from '../queries/claim-turns.js';
import type { EagerDispatch, TurnRef } from '../queries/commit-turn.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';
import type { SchemaNames } from '../queries/schema-names.js';
import type { TurnOutcome } from '../turn/contract.js';
import type { InstanceCache } from './instance-cache.js';
import type { WorkerEvents } from './worker-events.js';

export interface TurnLoopOptions {
  readonly workerId: string;
  readonly queues: readonly string[];
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflows: ReadonlyMap<string, WorkflowDefinition<any, any>>;
  readonly concurrency: number;
  readonly turnLeaseMs: number;
  readonly pollIntervalMs: number;
  /** Workflow instances kept between turns (0: none; every turn replays in full). */
  readonly workflowCacheSize: number;
  /** The worker's activity slots, when it serves activities: a turn's commit grants it the steps it schedules. */
  readonly dispatch?: EagerDispatchHost;
  /**
   * The `handle.result()` waiters of this process: told of each turn that runs here, and, once it settled, of
   * the run's end as stored when its commit ended the run.
   */
  readonly results?: LocalResults;
}

/**
 * Where eager dispatch goes: `reserve(most)` sets aside up to `most` of the activity slots free now (as many as
 * the turn schedules; undefined: none), `adopt()` starts
 * the steps a committed turn granted with them (`sentAtMs`: monotonic time before the commit was sent, for the
 * local lease deadline) and frees the rest — called once per reservation, with no steps when the commit failed.
 */
export interface EagerDispatchHost {
  reserve(most: number): EagerDispatch | undefined;
  adopt(reserved: EagerDispatch, granted: readonly ClaimedStepRow[], sentAtMs: number): void;
}

/** What a turn run by the loop (claimed, eager or fused) works with: the loop's database, options and state. */
export interface TurnLoopParts {
  readonly db: Database;
  readonly names: SchemaNames;
  readonly options: TurnLoopOptions;
  /** The workflow instances kept between turns. */
  readonly instances: InstanceCache;
  readonly events: WorkerEvents;
  readonly logger: Logger;
}

/** The claimed turn `row` as its commit names it (fenced on its token and nonce; `leaseMs`: the turn lease). */
export function turnRefOf(row: ClaimedTurnRow, leaseMs: number): TurnRef {
  return {
    runId: row.id,
    workflowName: row.name,
    token: BigInt(row.token),
    nonce: row.nonce,
    attempt: row.turn_attempt,
    wakeCount: row.wake_count,
    cancelRequested: row.cancel_requested,
    leaseMs,
    nowMs: row.now_ms,
  };
}

/**
 * Announce a committed turn (`turn:committed`); a turn that ended the run failed or cancelled also logs why
 * (`run:failed` warning, `run:cancelled` info), with the error's type, code and message: the reason, not only
 * that it happened.
 */
export function announceCommitted(
  parts: TurnLoopParts,
  runId: string,
  workflow: string,
  outcome: TurnOutcome,
  replay: 'full' | 'continued',
  grant: 'claimed' | 'eager' | 'fused',
): void {
  if (outcome.kind === 'failed' || outcome.kind === 'cancelled') {
    const { type, code, message } = outcome.error;
    parts.logger[outcome.kind === 'failed' ? 'warn' : 'info'](
      { runId, workflow, error: { type, ...(code ? { code } : {}), message } },
      `run:${outcome.kind}`,
    );
  }
  parts.events.emit('turn:committed', {
    runId,
    workflow,
    outcome: outcome.kind,
    replay,
    grant,
    ...(outcome.kind === 'failed' || outcome.kind === 'cancelled' ? { error: outcome.error } : {}),
  });
}

/** Granted steps as the fault points show their attempts. */
export function attemptRefsOf(granted: readonly ClaimedStepRow[]): AttemptRef[] {
  return granted.map((s) => ({
    runId: s.run_id,
    stepId: s.id,
    stepLabel: `${s.name}#${s.seq}`,
    attempt: s.attempt,
    token: BigInt(s.token),
  }));
}

/** A turn as the turn fault points show it (only built when a hook is set). */
export function turnFaultOf(row: ClaimedTurnRow, grant: 'claimed' | 'eager'): TurnFault {
  return {
    runId: row.id,
    workflowName: row.name,
    token: BigInt(row.token),
    turnAttempt: row.turn_attempt,
    grant,
  };
}
