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
 * The grant of step alias `alias` under `prev_` names — attempt, epoch, token (`prev_token`), nonce, worker, claim
 * time, the token it took over, its granted lease, `ended_nonce`, its lease's end and its deadline
 * (`prev_deadline_at`) — for a statement that replaces a step's grant (a claim taking over an expired lease, the
 * expiry sweep) and records the one it ended with {@link recordReplacedGrants}. For the `SELECT` list of the
 * statement's locking read.
 */
export function previousGrantColumns(alias: string): SQL {
  const a = sql.raw(alias);
  return sql`${a}.attempt AS prev_attempt, ${a}.epoch AS prev_epoch, ${a}.fencing_token AS prev_token,
             ${a}.nonce AS prev_nonce, ${a}.worker_id AS prev_worker_id, ${a}.claimed_at AS prev_claimed_at,
             ${a}.reclaimed_from_token AS prev_reclaimed_from_token, ${a}.granted_until AS prev_granted_until,
             ${a}.ended_nonce AS prev_ended_nonce, ${a}.lease_expires_at AS prev_lease_expires_at,
             ${a}.attempt_deadline_at AS prev_deadline_at`;
}

/**
 * The CTE `name` that records the expired grants a statement replaced: of the rows of CTE `picked` (its locking
 * read, with `run_id`, `id` and the {@link previousGrantColumns}) whose step CTE `replaced` wrote (it returns `id`)
 * and that `where` (over `p`) admits, the grant each held, ended when its lease did — `timed_out` when the lease
 * had reached the attempt's deadline, else `lease_expired`. Ends without a comma.
 */
export function recordReplacedGrants(
  n: SchemaNames,
  p: { readonly name: string; readonly picked: string; readonly replaced: string; readonly where?: SQL },
): SQL {
  return recordEndedGrants(n, {
    name: p.name,
    from: sql`(SELECT p.run_id, p.id, p.prev_attempt AS attempt, p.prev_epoch AS epoch, p.prev_token AS fencing_token,
                      p.prev_nonce AS nonce, p.prev_worker_id AS worker_id, p.prev_claimed_at AS claimed_at,
                      p.prev_reclaimed_from_token AS reclaimed_from_token, p.prev_granted_until AS granted_until,
                      p.prev_ended_nonce AS ended_nonce, p.prev_lease_expires_at, p.prev_deadline_at
                 FROM ${sql.raw(p.picked)} p
                WHERE p.id IN (SELECT id FROM ${sql.raw(p.replaced)})${p.where ? sql` AND (${p.where})` : sql``})`,
    outcome: sql`CASE WHEN g.prev_lease_expires_at >= g.prev_deadline_at THEN 'timed_out' ELSE 'lease_expired' END`,
    endedAt: sql`g.prev_lease_expires_at`,
    onlyOpen: true,
  });
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
