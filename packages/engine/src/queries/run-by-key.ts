import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/** Which run a start or an enqueue asked for: its new id and its idempotency key (or null). */
export interface RunIdentity {
  readonly runId: string;
  readonly idempotencyKey: string | null;
}

/** The id of the run that holds `p`'s id or key, as a scalar subquery (text). */
export function existingRunId(n: SchemaNames, p: RunIdentity): SQL {
  return sql`(SELECT id::text FROM ${n.runs} WHERE idempotency_key = ${p.idempotencyKey} OR id = ${p.runId}::uuid LIMIT 1)`;
}

/**
 * The outcome of an insert-run statement (`ON CONFLICT DO NOTHING` on id and key) that returned `created_id`
 * (null on conflict) and `existing_id` ({@link existingRunId}). A conflicting run that committed after the
 * statement's snapshot is read again here.
 * @throws Error when neither a new nor an existing run is found (`what` names the call).
 */
export async function settleRunInsert(
  db: Database,
  n: SchemaNames,
  p: RunIdentity,
  row: { created_id: string | null; existing_id: string | null } | undefined,
  what: string,
): Promise<{ runId: string; created: boolean }> {
  if (row?.created_id) return { runId: row.created_id, created: true };
  if (row?.existing_id) return { runId: row.existing_id, created: false };
  const again = await db.rows<{ id: string | null }>(sql`SELECT ${existingRunId(n, p)} AS id`);
  const id = again[0]?.id;
  if (!id) throw new Error(`${what} neither created nor found run ${p.runId}`);
  return { runId: id, created: false };
}
