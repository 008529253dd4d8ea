import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
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
 * never revives an expired lease, even one nobody reclaimed yet. The new lease is `now + lease_ms`, capped by
 * the attempt deadline (invariant 11), and the reclaim time moves with it. Entries that match nothing are
 * read back `FOR SHARE` (waiting for a concurrent claim to commit), recorded as `attempt:stale-rejected` events
 * and their attempt rows ended `rejected_stale`, in the same statement — unless the entry's own attempt ended the
 * step (same token and nonce, no longer `running`): its completion, failure or release committed while this
 * heartbeat was in flight, which is no stale write; such entries come back with reason `ended`. Returns one row
 * per entry, with the cancel request of renewed steps (the owner learns of a cancel at its next heartbeat).
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
        AS x(id uuid, token bigint, nonce uuid, has_details boolean, details jsonb)),
    renewed AS (
      UPDATE ${n.steps} s
         SET lease_expires_at = least(${n.now} + ${msInterval(sql`s.lease_ms`)}, s.attempt_deadline_at),
             next_run_at = least(${n.now} + ${msInterval(sql`s.lease_ms`)}, s.attempt_deadline_at)
                           + ${msInterval(sql`s.reclaim_delay_ms`)},
             heartbeat_details = CASE WHEN hb.has_details THEN hb.details ELSE s.heartbeat_details END,
             last_heartbeat_at = ${n.now}
        FROM hb
       WHERE s.id = hb.id AND s.fencing_token = hb.token AND s.nonce = hb.nonce
         AND s.status = 'running' AND s.lease_expires_at > ${n.now}
      RETURNING s.id, (extract(epoch FROM (s.lease_expires_at - ${n.now})) * 1000)::float8 AS remaining_ms,
                s.lease_expires_at >= s.attempt_deadline_at AS lease_capped,
                s.cancel_requested_at IS NOT NULL AS cancel_requested),
    lost AS (SELECT hb.id, hb.token, hb.nonce FROM hb WHERE NOT EXISTS (SELECT 1 FROM renewed r WHERE r.id = hb.id)),
    cur AS (
      SELECT s.id, s.run_id, s.fencing_token, s.status, lost.token AS stale_token,
             (s.fencing_token = lost.token AND s.nonce = lost.nonce AND s.status <> 'running') AS self_ended
        FROM ${n.steps} s JOIN lost ON lost.id = s.id
         FOR SHARE OF s),
    rej AS (
      INSERT INTO ${n.events} (run_id, step_id, type, attempt, epoch, fencing_token, worker_id, data, at)
      SELECT cur.run_id, cur.id, 'attempt:stale-rejected', a.attempt, a.epoch, cur.stale_token, a.worker_id,
             jsonb_build_object('operation', 'heartbeat', 'staleToken', cur.stale_token::text,
                                'currentToken', cur.fencing_token::text,
                                'reason', CASE WHEN cur.fencing_token IS DISTINCT FROM cur.stale_token THEN 'superseded'
                                               WHEN cur.status <> 'running' THEN cur.status ELSE 'expired' END),
             ${n.now}
        FROM cur LEFT JOIN ${n.attempts} a ON a.fencing_token = cur.stale_token
       WHERE NOT cur.self_ended
      RETURNING step_id, data),
    rej_attempts AS (
      UPDATE ${n.attempts} a SET outcome = coalesce(a.outcome, 'rejected_stale'), ended_at = coalesce(a.ended_at, ${n.now})
        FROM lost WHERE a.fencing_token = lost.token
         AND NOT EXISTS (SELECT 1 FROM cur WHERE cur.id = lost.id AND cur.self_ended)
      RETURNING 1)
    SELECT r.id::text, true AS renewed, r.remaining_ms, r.lease_capped, r.cancel_requested, NULL AS current_token,
           NULL AS reason
      FROM renewed r
    UNION ALL
    SELECT l.id::text, false, NULL, NULL, false, (SELECT fencing_token::text FROM cur WHERE cur.id = l.id),
           CASE WHEN EXISTS (SELECT 1 FROM cur WHERE cur.id = l.id AND cur.self_ended) THEN 'ended'
                ELSE coalesce((SELECT data->>'reason' FROM rej WHERE rej.step_id = l.id LIMIT 1), 'step not found') END
      FROM lost l`);
}
