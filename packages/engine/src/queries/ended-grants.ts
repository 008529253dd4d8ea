import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from './schema-names.js';

/**
 * The grant columns of a step row that an ended attempt's row copies (migration 0029), as a statement that ends
 * grants returns them: `run_id`, `id` (the step), `attempt`, `epoch`, `fencing_token`, `nonce`, `worker_id`,
 * `claimed_at`, `reclaimed_from_token`, `granted_until`, `ended_nonce`. For a `RETURNING` or `SELECT` list over
 * step alias `alias`.
 */
export function grantColumns(alias: string): SQL {
  const a = sql.raw(alias);
  return sql`${a}.run_id, ${a}.id, ${a}.attempt, ${a}.epoch, ${a}.fencing_token, ${a}.nonce, ${a}.worker_id,
             ${a}.claimed_at, ${a}.reclaimed_from_token, ${a}.granted_until, ${a}.ended_nonce`;
}

/**
 * The CTE `name` that records how activity grants ended other than by their own completion (migration 0029): one
 * `attempts` row per row of `from` (alias `g`, with the {@link grantColumns}) whose grant a claim made
 * (`claimed_at` set), copying that grant, with `outcome`, `ended_at` and `error` (SQL over `g`; `attempt`
 * overrides the attempt number, for a release, which gives the claim back). A grant already recorded keeps its
 * row (`ON CONFLICT` on the fencing token: the first ending wins, as `outcome IS NULL` guarded the update that did
 * this before). `onlyOpen` leaves out grants their own write ended (`ended_nonce` is theirs: a completion,
 * failure or release recorded them already, or reads them off the step): for the statements that end whatever
 * grant a step holds. Ends without a comma.
 */
export function recordEndedGrants(
  n: SchemaNames,
  p: {
    readonly name: string;
    readonly from: SQL;
    readonly outcome: SQL;
    readonly endedAt: SQL;
    readonly error?: SQL;
    readonly attempt?: SQL;
    readonly where?: SQL;
    readonly onlyOpen?: boolean;
  },
): SQL {
  return sql`${sql.raw(p.name)} AS (
      INSERT INTO ${n.attemptRecords} (run_id, step_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at,
                                 reclaimed_from_token, granted_until, outcome, ended_at, error)
      SELECT g.run_id, g.id, 'activity', ${p.attempt ?? sql`g.attempt`}, g.epoch, g.fencing_token, g.nonce,
             g.worker_id, g.claimed_at, g.reclaimed_from_token, g.granted_until, ${p.outcome}, ${p.endedAt},
             ${p.error ?? sql`NULL::jsonb`}
        FROM ${p.from} g
       WHERE g.claimed_at IS NOT NULL${p.onlyOpen ? sql` AND g.ended_nonce IS DISTINCT FROM g.nonce` : sql``}${
         p.where ? sql` AND (${p.where})` : sql``
       }
      ON CONFLICT (fencing_token) DO NOTHING
      RETURNING 1)`;
}
