/**
 * Rewriting a stored step's options, as a row written by an older engine (or an operator) could have them: since
 * migration 0027 a step names its options by `policy_id`, a row of `policies` keyed by their content, and keeps
 * its policy's `maximumAttempts` as `max_attempts`.
 */
import { sql } from 'drizzle-orm';
import type { Engine } from '@palisade/engine';

/**
 * Give every step of run `runId` the retry policy `retryPolicy` (a JSON object, stored as given), keeping each
 * step's lease and start-to-close timeout: the option set's `policies` row is inserted when new, and the steps
 * name it. Resolves to the retry policy the run's first step then reads through its `policy_id`.
 * @throws Error when the run has no step.
 */
export async function setStepRetryPolicy(
  engine: Engine,
  runId: string,
  retryPolicy: object,
): Promise<unknown> {
  const n = engine.names;
  const policy = sql`${JSON.stringify(retryPolicy)}::jsonb`;
  await engine.database.rows(sql`
    WITH cur AS (
      SELECT s.id, p.lease_ms, p.start_to_close_timeout_ms
        FROM ${n.steps} s JOIN ${n.policies} p ON p.id = s.policy_id
       WHERE s.run_id = ${runId}::uuid),
    made AS (
      INSERT INTO ${n.policies} (id, retry_policy, lease_ms, start_to_close_timeout_ms)
      SELECT DISTINCT ${n.policyId}(${policy}, c.lease_ms, c.start_to_close_timeout_ms), ${policy}, c.lease_ms,
             c.start_to_close_timeout_ms
        FROM cur c
      ON CONFLICT DO NOTHING
      RETURNING 1)
    UPDATE ${n.steps} s
       SET policy_id = ${n.policyId}(${policy}, c.lease_ms, c.start_to_close_timeout_ms),
           max_attempts = (${policy}->>'maximumAttempts')::int
      FROM cur c WHERE s.id = c.id`);
  const [stored] = await engine.database.rows<{ retry_policy: unknown }>(sql`
    SELECT p.retry_policy FROM ${n.steps} s JOIN ${n.policies} p ON p.id = s.policy_id
     WHERE s.run_id = ${runId}::uuid ORDER BY s.seq LIMIT 1`);
  if (!stored) throw new Error(`run ${runId} has no step`);
  return stored.retry_policy;
}
