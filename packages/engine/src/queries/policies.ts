import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from './schema-names.js';

/**
 * A CTE `<name>` that inserts the option sets of `source` into `policies` (migration 0027), each once, keyed by
 * `<schema>.policy_id` of its content. `source` is a query with the columns `retry_policy jsonb`, `lease_ms int` and
 * `start_to_close_timeout_ms int`; its rows may repeat a set. Ends with a comma.
 *
 * `ON CONFLICT DO NOTHING`: a set that exists (the common case: a workload has a handful) is found by the primary
 * key's pre-check and nothing is written, no WAL and no lock. A set inserted by a transaction still in flight is
 * waited for (a new set's first statements only, as for any unique key); the rows are inserted in key order, so two
 * statements inserting the same new sets wait in one order and cannot deadlock each other. Nothing updates or
 * deletes a policy row, and a step names its policy by key, without a foreign key, so the step's insert in the
 * same statement (which cannot see this CTE's row) needs none of it.
 */
export function policiesInserted(n: SchemaNames, name: string, source: SQL): SQL {
  return sql`
    ${sql.raw(name)} AS (
      INSERT INTO ${n.policies} (id, retry_policy, lease_ms, start_to_close_timeout_ms)
      SELECT DISTINCT ${n.policyId}(x.retry_policy, x.lease_ms, x.start_to_close_timeout_ms), x.retry_policy, x.lease_ms,
             x.start_to_close_timeout_ms
        FROM (${source}) x
       ORDER BY 1
      ON CONFLICT (id) DO NOTHING
      RETURNING 1),`;
}

/** A step's `max_attempts` from its retry policy (jsonb): `maximumAttempts`, or null when the policy has none. */
export function maxAttemptsOf(retryPolicy: SQL): SQL {
  return sql`(${retryPolicy}->>'maximumAttempts')::int`;
}
