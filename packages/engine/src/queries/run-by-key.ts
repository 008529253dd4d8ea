import { sql, type SQL } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * Which run a start or an enqueue asked for: its new id, what it starts (a key is scoped to it) and its
 * idempotency key (or null).
 */
export interface RunIdentity {
  readonly runId: string;
  readonly kind: 'workflow' | 'activity';
  readonly name: string;
  readonly idempotencyKey: string | null;
  readonly input: unknown;
}

/** What an insert-run statement found: the run this call names, and whether it created it. */
export interface RunInsertOutcome {
  readonly runId: string;
  /**
   * True when this call created the run, including a retry of this call after a lost reply (the run has the
   * id this call generated).
   */
  readonly created: boolean;
  /** Whether the run's stored input equals this call's input (jsonb equality); true when created. */
  readonly sameInput: boolean;
}

/**
 * The run that holds `p`'s id, or its key within the same workflow or activity (kind and name), as a scalar
 * subquery returning `id::text || ':' || (input = the new input)`. Plain read; no locks.
 */
export function existingRun(n: SchemaNames, p: RunIdentity): SQL {
  return sql`(SELECT id::text || ':' || (input = ${JSON.stringify(p.input ?? null)}::jsonb)::text
                FROM ${n.runs}
               WHERE id = ${p.runId}::uuid
                  OR (kind = ${p.kind} AND name = ${p.name} AND idempotency_key = ${p.idempotencyKey})
               ORDER BY (id = ${p.runId}::uuid) DESC
               LIMIT 1)`;
}

function parseExisting(value: string, p: RunIdentity): RunInsertOutcome {
  const [id = '', same] = value.split(':');
  return { runId: id, created: id === p.runId, sameInput: same === 'true' };
}

/**
 * The outcome of an insert-run statement (`ON CONFLICT DO NOTHING` on the id and on (kind, name, key)) that
 * returned `created_id` (null on conflict) and `existing` ({@link existingRun}). A conflicting run that committed
 * after the statement's snapshot is read again here.
 * @throws Error when neither a new nor an existing run is found (`what` names the call).
 */
export async function settleRunInsert(
  db: Database,
  n: SchemaNames,
  p: RunIdentity,
  row: { created_id: string | null; existing: string | null } | undefined,
  what: string,
): Promise<RunInsertOutcome> {
  if (row?.created_id) return { runId: row.created_id, created: true, sameInput: true };
  if (row?.existing) return parseExisting(row.existing, p);
  const again = await db.rows<{ existing: string | null }>(sql`SELECT ${existingRun(n, p)} AS existing`);
  const existing = again[0]?.existing;
  if (!existing) throw new Error(`${what} neither created nor found run ${p.runId}`);
  return parseExisting(existing, p);
}
