import { sql } from 'drizzle-orm';
import type { Database } from '../db/database.js';
import type { SchemaNames } from './schema-names.js';

/**
 * Settle a claim whose outcome is unknown (the connection failed around its COMMIT; I15): the steps that
 * claim took, if it committed, still carry its `claim_request_id` and are `running`. The worker releases them
 * rather than running them late. Plain read, no locks.
 */
export async function findClaimedByRequest(
  db: Database,
  n: SchemaNames,
  claimRequestId: string,
): Promise<
  { id: string; run_id: string; name: string; seq: number; attempt: number; token: string; nonce: string }[]
> {
  return db.rows(sql`
    SELECT id::text, run_id::text, name, seq, attempt, fencing_token::text AS token, nonce::text
      FROM ${n.steps} WHERE claim_request_id = ${claimRequestId}::uuid AND status = 'running'`);
}
