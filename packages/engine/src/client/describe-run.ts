/**
 * The one place where database rows (snake_case, ISO 8601 text times) become the public shapes of
 * `descriptions.ts` (camelCase, `Date`s, status unions). Pure; no I/O.
 * @module
 */
import type { AttemptRow, ChildRunRow, EventRow, RunRow, StepRow } from '../queries/read-run.js';
import type { SignalRow } from '../queries/send-signal.js';
import type { UnclaimedWork } from '../queries/unclaimed-work.js';
import type { WatchedEventRow } from '../queries/watch-run.js';
import type {
  AttemptDescription,
  ChildRunDescription,
  EventDescription,
  RunDescription,
  RunDetails,
  SignalDescription,
  StepDescription,
} from './descriptions.js';

/** An ISO 8601 time as read from the database, as a `Date`. */
function date(iso: string): Date {
  return new Date(iso);
}

/** An ISO 8601 time or null, as a `Date` or null. */
function dateOrNull(iso: string | null): Date | null {
  return iso === null ? null : new Date(iso);
}

/** A run row as its public shape. */
export function describeRun(row: RunRow): RunDescription {
  return {
    id: row.id,
    kind: row.kind,
    name: row.name,
    status: row.status,
    input: row.input,
    output: row.output,
    error: row.error,
    progress: row.progress,
    parentRunId: row.parent_run_id,
    scheduleId: row.schedule_id,
    scheduleTickAt: dateOrNull(row.schedule_tick_at),
    concurrency: row.concurrency,
    idempotencyKey: row.idempotency_key,
    queue: row.queue,
    priority: row.priority,
    cancelReason: row.cancel_reason,
    createdAt: date(row.created_at),
    startAt: dateOrNull(row.start_at),
    startedAt: dateOrNull(row.started_at),
    finishedAt: dateOrNull(row.finished_at),
  };
}

/** An attempt row as its public shape. */
export function describeAttempt(row: AttemptRow): AttemptDescription {
  return {
    stepId: row.step_id,
    kind: row.kind,
    attempt: row.attempt,
    epoch: row.epoch,
    token: row.token,
    workerId: row.worker_id,
    claimedAt: date(row.claimed_at),
    endedAt: dateOrNull(row.ended_at),
    outcome: row.outcome,
    durationMs: row.duration_ms,
  };
}

/** A step row and its attempts (any order of the run's; those of other steps are ignored) as its public shape. */
export function describeStep(row: StepRow, attempts: readonly AttemptDescription[]): StepDescription {
  return {
    id: row.id,
    seq: row.seq,
    kind: row.kind,
    name: row.name,
    status: row.status,
    attempt: row.attempt,
    epoch: row.epoch,
    token: row.token,
    output: row.output,
    error: row.error,
    // A running step is not due: its row's next_run_at is when its lease lets it be reclaimed (leaseExpiresAt).
    nextRunAt: row.status === 'running' ? null : dateOrNull(row.next_run_at),
    leaseExpiresAt: dateOrNull(row.lease_expires_at),
    heartbeatDetails: row.heartbeat_details,
    retiredAt: dateOrNull(row.retired_at),
    concurrency: row.concurrency,
    rateLimit:
      row.rate_limit === null
        ? null
        : { key: row.rate_limit.key, limit: row.rate_limit.limit, periodMs: row.rate_limit.period_ms },
    attempts: attempts.filter((a) => a.stepId === row.id),
  };
}

/** An event row as its public shape. */
export function describeEvent(row: EventRow): EventDescription {
  return {
    id: row.id,
    stepId: row.step_id,
    type: row.type,
    attempt: row.attempt,
    epoch: row.epoch,
    token: row.token,
    workerId: row.worker_id,
    data: row.data,
    at: date(row.at),
  };
}

/** An event row of a watch (its position columns left out) as its public shape, without its cursor. */
export function describeWatchedEvent(
  row: Omit<WatchedEventRow, 'at_us' | 'rank' | 'ord'>,
): EventDescription & { readonly stepName: string | null } {
  return { ...describeEvent(row), stepName: row.step_name };
}

/** A signal row as its public shape. */
export function describeSignal(row: SignalRow): SignalDescription {
  return {
    id: row.id,
    name: row.name,
    payload: row.payload,
    receivedAt: date(row.received_at),
    stepId: row.step_id,
    stepSeq: row.step_seq,
    consumedAt: dateOrNull(row.consumed_at),
    undelivered: row.undelivered,
  };
}

/** A child run row as its public shape. */
export function describeChildRun(row: ChildRunRow): ChildRunDescription {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    seq: row.seq,
    createdAt: date(row.created_at),
    finishedAt: dateOrNull(row.finished_at),
  };
}

/** Everything `handle.describe()` read about a run, as its public shape. */
export function describeRunDetails(read: {
  readonly run: RunRow;
  readonly steps: readonly StepRow[];
  readonly attempts: readonly AttemptRow[];
  readonly events: readonly EventRow[];
  readonly signals: readonly SignalRow[];
  readonly children: readonly ChildRunRow[];
  readonly unclaimed: readonly UnclaimedWork[];
}): RunDetails {
  const attempts = read.attempts.map(describeAttempt);
  return {
    run: describeRun(read.run),
    steps: read.steps.map((s) => describeStep(s, attempts)),
    turns: attempts.filter((a) => a.stepId === null),
    events: read.events.map(describeEvent),
    signals: read.signals.map(describeSignal),
    children: read.children.map(describeChildRun),
    unclaimed: read.unclaimed,
  };
}
