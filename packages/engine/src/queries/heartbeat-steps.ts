import { sql } from 'drizzle-orm';
import { jsonRowsLimit } from './row-estimates.js';
import type { Database } from '../db/database.js';
import { staleAttempt, staleReason, toldCte } from './fenced-outcome.js';
import { msInterval, type SchemaNames } from './schema-names.js';

export interface HeartbeatEntry {
  readonly stepId: string;
  readonly token: bigint;
  readonly nonce: string;
  /** `undefined`: keep the stored details. */
  readonly details?: unknown;
}

export interface HeartbeatResultRow {
  id: string;
  /** The entry's token: a worker may hold a zombie attempt and its successor of one step (same id). */
  token: string;
  renewed: boolean;
  /** Lease left after renewal by the DB clock (ms); null when not renewed. */
  remaining_ms: number | null;
  /** The renewed lease ends at the attempt deadline (start-to-close) rather than a full `lease_ms` later. */
  lease_capped: boolean | null;
  cancel_requested: boolean;
  current_token: string | null;
  reason: string | null;
}

/**
 * Renew many leases in one statement (invariants 3 and 7; I6, I10).
 *
 * Predicate per entry: the fence (id, token, nonce, `running`, `lease_expires_at > now()`) — so a heartbeat
 * never revives an expired lease, even one nobody reclaimed yet. The new lease is `now + lease_ms` (of the step's
 * `policies` row, read with the step's lock by primary key; it takes no lock), capped by the attempt deadline
 * (invariant 11), and the reclaim time moves with it.
 *
 * Locks: first every entry's step row, in id order (`FOR NO KEY UPDATE`; invariant 14 — the heartbeat locks no
 * run row, and steps are always locked by id, so it cannot close a cycle with a cancel or a turn that holds a
 * run and locks its steps by id). The locking read waits for a concurrent claim or ending to commit and returns
 * the step's latest version, which the rejection reads.
 *
 * Entries that match nothing are recorded as `attempt:stale-rejected` events with the {@link staleReason} and
 * their attempt rows ended `rejected_stale` (unless already ended), in the same statement — unless the entry's
 * own attempt ended the step: only its own committed outcome (its nonce in `ended_nonce`: a completion, failure
 * or release that committed while this heartbeat was in flight) counts, and such entries come back with reason
 * `ended`. A step ended by anything else (a cancel, the run's end, a retry's retirement, expiry) is a lost lease
 * with its reason (invariant 12). Returns one row per entry, with the cancel request of renewed steps (the
 * owner learns of a cancel at its next heartbeat). Entries are told apart by step and token: one worker may hold
 * a zombie attempt and its successor of the same step, and the successor's renewal says nothing of the zombie's.
 */
export async function heartbeatSteps(
  db: Database,
  n: SchemaNames,
  entries: readonly HeartbeatEntry[],
): Promise<HeartbeatResultRow[]> {
  if (entries.length === 0) return [];
  const payload = JSON.stringify(
    entries.map((e) => ({
      id: e.stepId,
      token: e.token.toString(),
      nonce: e.nonce,
      has_details: e.details !== undefined,
      details: e.details === undefined ? null : e.details,
    })),
  );
  return db.rows<HeartbeatResultRow>(sql`
    WITH hb AS (
      SELECT * FROM jsonb_to_recordset(${payload}::jsonb)
        AS x(id uuid, token bigint, nonce uuid, has_details boolean, details jsonb)${jsonRowsLimit(entries.length)}),
    locked AS MATERIALIZED (
      SELECT s.id, s.run_id, s.fencing_token, s.status, s.ended_nonce, s.retired_at, s.attempt, s.epoch,
             s.worker_id, s.claimed_at,
             (SELECT pol.lease_ms FROM ${n.policies} pol WHERE pol.id = s.policy_id) AS lease_ms
        FROM ${n.steps} s WHERE s.id IN (SELECT id FROM hb)
       ORDER BY s.id
         FOR NO KEY UPDATE OF s),
    -- The clock read once every lock is held (see runLockCte's lock_clock): read before a wait on a row another
    -- statement only locked, it would renew a lease that ran out during the wait.
    lock_clock AS MATERIALIZED (SELECT ${n.now} AS now_at FROM (SELECT count(*) FROM locked) x),
    renewed AS (
      UPDATE ${n.steps} s
         SET lease_expires_at = least((SELECT now_at FROM lock_clock) + ${msInterval(sql`l.lease_ms`)}, s.attempt_deadline_at),
             next_run_at = least((SELECT now_at FROM lock_clock) + ${msInterval(sql`l.lease_ms`)}, s.attempt_deadline_at)
                           + ${msInterval(sql`s.reclaim_delay_ms`)},
             heartbeat_details = CASE WHEN hb.has_details THEN hb.details ELSE s.heartbeat_details END,
             last_heartbeat_at = (SELECT now_at FROM lock_clock)
        FROM hb JOIN locked l ON l.id = hb.id
       WHERE s.id = hb.id AND s.fencing_token = hb.token AND s.nonce = hb.nonce
         AND s.status = 'running' AND s.lease_expires_at > (SELECT now_at FROM lock_clock)
      RETURNING s.id, s.fencing_token, (extract(epoch FROM (s.lease_expires_at - ${n.now})) * 1000)::float8 AS remaining_ms,
                s.lease_expires_at >= s.attempt_deadline_at AS lease_capped,
                s.cancel_requested_at IS NOT NULL AS cancel_requested),
    lost AS (
      SELECT hb.id, hb.token, hb.nonce FROM hb
       WHERE NOT EXISTS (SELECT 1 FROM renewed r WHERE r.id = hb.id AND r.fencing_token = hb.token)),
    cur AS (
      SELECT l.id, l.run_id, l.fencing_token, l.status, l.retired_at, lost.token AS stale_token,
             l.ended_nonce IS NOT DISTINCT FROM lost.nonce AS self_ended, l.attempt, l.epoch, l.worker_id,
             l.claimed_at
        FROM locked l JOIN lost ON lost.id = l.id),
    rej AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, at)
      SELECT cur.run_id, cur.id, 'attempt:stale-rejected', ${staleAttempt('attempt')}, ${staleAttempt('epoch')},
             cur.stale_token, ${staleAttempt('worker_id')},
             jsonb_build_object('operation', 'heartbeat', 'staleToken', cur.stale_token::text,
                                'currentToken', cur.fencing_token::text,
                                'reason', ${staleReason(n, 'cur', sql`cur.stale_token`)}),
             ${n.now}
        FROM cur LEFT JOIN ${n.attemptRecords} a ON a.fencing_token = cur.stale_token
       WHERE NOT cur.self_ended
      RETURNING step_id, fencing_token, data),
    ${toldCte(n, 'cur', sql`cur.stale_token`, sql`NOT cur.self_ended`)},
    rej_attempts AS (
      UPDATE ${n.attemptRecords} a SET outcome = coalesce(a.outcome, 'rejected_stale'), ended_at = coalesce(a.ended_at, ${n.now})
        FROM lost WHERE a.fencing_token = lost.token
         AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.id = lost.id AND cur.stale_token = lost.token AND cur.self_ended)
      RETURNING 1)
    SELECT r.id::text, r.fencing_token::text AS token, true AS renewed, r.remaining_ms, r.lease_capped, r.cancel_requested, NULL AS current_token,
           NULL AS reason, (SELECT count(*) FROM told) AS told
      FROM renewed r
    UNION ALL
    SELECT l.id::text, l.token::text, false, NULL, NULL, false,
           (SELECT fencing_token::text FROM cur WHERE cur.id = l.id AND cur.stale_token = l.token),
           CASE WHEN EXISTS (SELECT 1 FROM cur WHERE cur.id = l.id AND cur.stale_token = l.token AND cur.self_ended)
                THEN 'ended'
                ELSE coalesce((SELECT data->>'reason' FROM rej WHERE rej.step_id = l.id AND rej.fencing_token = l.token
                                LIMIT 1), 'step not found') END,
           (SELECT count(*) FROM told)
      FROM lost l`);
}
