import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';
import { liveRunStatuses } from './status-sql.js';
import type { RunKind, RunStatus, TerminalRunStatus } from '../turn/state-machine.js';

/** What sending a signal found: the run's kind and status, and whether the signal is stored (now or before). */
export interface SentSignal {
  readonly kind: RunKind;
  readonly status: RunStatus;
  /** The signal's id (arrival order) when it is stored: by this call, or by an earlier try of the same request. */
  readonly signalId: string | null;
}

/**
 * Store a signal for workflow run `runId` and wake the run, in one transaction: the run row is locked first (a
 * statement of its own, so the next one reads everything committed before the lock), then the signal is inserted,
 * in arrival order (its id), unless the run has ended or is not a workflow run, and the run's `wake_count` is
 * bumped with its next turn due now — a turn in progress commits with its run due again (commitTurn), and a kept
 * instance is not continued by a fused step past it. Workers of the run's queue are NOTIFYed at COMMIT unless a
 * turn of the run holds a live lease (its commit sends the wake-up). `requestId` makes the call idempotent: a
 * retry after a lost reply finds the signal stored and stores nothing.
 * @returns undefined when no such run exists.
 */
export async function sendSignal(
  db: Database,
  n: SchemaNames,
  p: { runId: string; name: string; payload: unknown; requestId: string },
): Promise<SentSignal | undefined> {
  return db.transaction((tx) => storeSignal(tx, n, p));
}

/**
 * {@link sendSignal}'s two statements, in the caller's transaction `tx` (which holds the run's row lock from the
 * first to its COMMIT): for a signal-with-start, which creates the run in the same transaction.
 */
export async function storeSignal(
  tx: Pick<Database, 'rows'>,
  n: SchemaNames,
  p: { runId: string; name: string; payload: unknown; requestId: string },
): Promise<SentSignal | undefined> {
  {
    const runs = await tx.rows<{ kind: RunKind; status: RunStatus }>(sql`
      SELECT kind, status FROM ${n.runs} WHERE id = ${p.runId}::uuid FOR NO KEY UPDATE`);
    const run = runs[0];
    if (!run) return undefined;
    const rows = await tx.rows<{ signal_id: string | null }>(sql`
      WITH prior AS (SELECT id FROM ${n.signals} WHERE request_id = ${p.requestId}::uuid),
      clock AS MATERIALIZED (SELECT ${n.now} AS t),
      ins AS (
        INSERT INTO ${n.signals} (run_id, name, payload, request_id, created_at)
        SELECT r.id, ${p.name}, ${JSON.stringify(p.payload ?? null)}::jsonb, ${p.requestId}::uuid, (SELECT t FROM clock)
          FROM ${n.runs} r
         WHERE r.id = ${p.runId}::uuid AND r.kind = 'workflow' AND r.status IN ${liveRunStatuses}
           AND NOT EXISTS (SELECT 1 FROM prior)
        RETURNING id, run_id),
      woke AS (
        UPDATE ${n.runs} r SET wake_count = r.wake_count + 1,
                               turn_next_run_at = least(coalesce(r.turn_next_run_at, (SELECT t FROM clock)), (SELECT t FROM clock))
          FROM ins WHERE r.id = ins.run_id
        RETURNING r.queue, r.turn_lease_expires_at),
      notified AS (
        SELECT pg_notify(${n.channel}, 'turn:' || queue) FROM woke
         WHERE turn_lease_expires_at IS NULL OR turn_lease_expires_at <= (SELECT t FROM clock))
      SELECT coalesce((SELECT id FROM ins), (SELECT id FROM prior))::text AS signal_id,
             (SELECT count(*) FROM notified) AS notified`);
    return { kind: run.kind, status: run.status, signalId: rows[0]?.signal_id ?? null };
  }
}

/** A signal of a run as `describe()` and `palisade runs show` list it. */
export interface SignalRow {
  readonly id: string;
  readonly name: string;
  readonly payload: unknown;
  /** ISO 8601, UTC, ms (database clock). */
  readonly received_at: string;
  /** The wait step that took it (and when), or null while it is pending or when no wait will take it. */
  readonly step_id: string | null;
  readonly step_seq: number | null;
  /** ISO 8601, UTC, ms: when a wait took it, or when it became undelivered; null while pending. */
  readonly consumed_at: string | null;
  /**
   * Why no wait will take it, or null (pending, or taken): `invalid-payload` — the wait at `seq` refused its
   * payload (`message` quotes the schema) and went on waiting; `run-ended` — the run ended (`status`) first.
   */
  readonly undelivered: UndeliveredSignal | null;
}

/** Why no wait will take a signal (`signals.undelivered`). */
export type UndeliveredSignal =
  | { readonly reason: 'invalid-payload'; readonly seq: number; readonly message: string }
  | { readonly reason: 'run-ended'; readonly status: TerminalRunStatus };

/** The signals of run `runId` in arrival order; plain read. */
export async function readSignals(db: Database, n: SchemaNames, runId: string): Promise<SignalRow[]> {
  return db.rows<SignalRow>(sql`
    SELECT g.id::text, g.name, g.payload,
           to_char(g.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS received_at,
           g.step_id::text, (SELECT s.seq FROM ${n.steps} s WHERE s.id = g.step_id) AS step_seq,
           to_char(g.consumed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS consumed_at,
           g.undelivered
      FROM ${n.signals} g WHERE g.run_id = ${runId}::uuid ORDER BY g.id`);
}
