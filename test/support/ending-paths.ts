/**
 * The matrix of issue 9's "every ending reaches its holder" tests (in-process: core/endings-reach-holder.test.ts;
 * worker processes: cases/endings-reach-holder-processes.test.ts): the admin paths that end or supersede a holder's
 * attempt, the ways the holder comes back, and what it must be told; and {@link takeAdminPath}, which takes a
 * path on a run whose holder H1 holds position 1.
 */
import { sql } from 'drizzle-orm';
import { expect } from 'vitest';
import type { Engine, RunHandle } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';

export const ADMIN_PATHS = [
  'retry-after-failure',
  'retry-after-cancel',
  'cancel',
  'revoke',
  'expiry',
] as const;
export type AdminPath = (typeof ADMIN_PATHS)[number];
export type Comeback = 'heartbeat' | 'completion' | 'failure' | 'fenced-transaction' | 'fenced-resource';

/** The `LeaseLostError.reason` the holder is refused with, by admin path. */
export const EXPECTED_REASON: Record<AdminPath, string> = {
  'retry-after-failure': 'retired',
  'retry-after-cancel': 'retired',
  cancel: 'cancelled',
  revoke: 'superseded',
  expiry: 'superseded',
};

/** The ways back to try after `path`: a cancel alone grants no successor, so no resource has a newer token. */
export function comebacksAfter(path: AdminPath): Comeback[] {
  const all: Comeback[] = ['heartbeat', 'completion', 'failure', 'fenced-transaction', 'fenced-resource'];
  return path === 'cancel' ? all.filter((c) => c !== 'fenced-resource') : all;
}

/**
 * Take `path` on the run of `handle`, whose step at position 1 is held by H1 under a lease of `leaseMs` (ms, by
 * the database clock), asserting the run's ending on the paths that end it. `whileLeaseKept` runs on
 * `retry-after-cancel` after the retry, while the cancel has left H1's lease running (before it is run out).
 */
export async function takeAdminPath(
  engine: Engine,
  handle: RunHandle,
  path: AdminPath,
  { leaseMs, whileLeaseKept }: { leaseMs: number; whileLeaseKept?: () => Promise<void> },
): Promise<void> {
  switch (path) {
    case 'retry-after-failure':
      // H1's lease runs out by the database clock (not by H1's); expiry maintenance fails the step (no attempts
      // left), the run fails, and an operator retries it: `compensate` is retired and scheduled again.
      await advanceClock(engine, leaseMs + 1_000);
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
      await engine.client.retry(handle.runId);
      break;
    case 'retry-after-cancel':
      expect(await handle.cancel('operator')).toBe('running');
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
      await engine.client.retry(handle.runId);
      await whileLeaseKept?.();
      // The cancel left H1's lease running: only its end by the database clock lets the position be granted.
      await advanceClock(engine, leaseMs + 1_000);
      break;
    case 'cancel':
      expect(await handle.cancel('operator')).toBe('running');
      await expect(handle.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
      break;
    case 'revoke':
      // What an operator's revoke does to a live attempt: a new token from the sequence, the lease ended now.
      await engine.database.rows(sql`
        UPDATE ${engine.names.steps}
           SET fencing_token = nextval(${`"${engine.schema}".fencing_token_seq`}::regclass),
               lease_expires_at = ${engine.names.now}, next_run_at = ${engine.names.now}
         WHERE id = (SELECT id FROM ${engine.names.steps}
                      WHERE run_id = ${handle.runId}::uuid AND seq = 1 ORDER BY created_at LIMIT 1)`);
      break;
    case 'expiry':
      await advanceClock(engine, leaseMs + 1_000);
      break;
  }
}
