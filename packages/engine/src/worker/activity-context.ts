import { PAYLOAD_LIMITS, type ActivityContext, type FencedTransaction } from '@palisade/sdk';
import { checkPayload, fencingInfo } from '@palisade/sdk/internal';
import type { ClaimedStepRow } from '../queries/claim-steps.js';
import type { AttemptRef } from '../queries/fenced-outcome.js';

/** What the context of one attempt is made of: its grant, and the attempt's calls it hands to user code. */
export interface ActivityContextOptions {
  readonly row: ClaimedStepRow;
  readonly token: bigint;
  readonly workerId: string;
  readonly signal: AbortSignal;
  heartbeat(details?: unknown): Promise<void>;
  fencedTransaction<T>(fn: (tx: FencedTransaction) => Promise<T>): Promise<T>;
}

/**
 * The `ctx` handed to an activity's `run(input, ctx)`: a frozen `info` read from the grant, the attempt's abort
 * signal, and its `heartbeat` and `fencedTransaction`. The context holds no state of its own (as Temporal keeps
 * its activity `Context` apart from the runner): every call goes to the attempt, which owns the fence.
 */
export function createActivityContext(o: ActivityContextOptions): ActivityContext {
  const { row } = o;
  const info = Object.freeze({
    runId: row.run_id,
    stepId: row.id,
    activityName: row.name,
    seq: row.seq,
    attempt: row.attempt,
    epoch: row.epoch,
    fencing: fencingInfo(row.fencing_scope, o.token),
    heartbeatDetails: row.heartbeat_details ?? undefined,
    queue: row.queue,
    workerId: o.workerId,
    leaseMs: row.lease_ms,
    startToCloseTimeoutMs: row.start_to_close_timeout_ms,
  });
  return {
    info,
    signal: o.signal,
    heartbeat: (details?: unknown) => o.heartbeat(details),
    fencedTransaction: <T>(fn: (tx: FencedTransaction) => Promise<T>) => o.fencedTransaction(fn),
  };
}

/**
 * Heartbeat details as they will be stored: checked here, by the call that brought them — the heartbeat statement
 * renews every lease of the worker at once, and details it cannot store (a BigInt, a NUL, a cycle) would fail it
 * for every attempt — and copied, as the caller may change the object before the statement is sent.
 * @throws ValidationError naming what cannot be stored; PalisadeError `PAYLOAD_TOO_LARGE`.
 */
export function storableHeartbeatDetails(details: unknown, activityName: string, ref: AttemptRef): unknown {
  const text = checkPayload(
    details,
    `heartbeat details of activity ${activityName}`,
    PAYLOAD_LIMITS.heartbeatDetailsBytes,
    ref,
  );
  return JSON.parse(text) as unknown;
}
