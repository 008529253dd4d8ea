/**
 * The matrix of issue 9's "every ending reaches its holder" tests (in-process: core/endings-reach-holder.test.ts;
 * worker processes: cases/endings-reach-holder-processes.test.ts): the admin paths that end or supersede a holder's
 * attempt, the ways the holder comes back, and what it must be told.
 */

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
