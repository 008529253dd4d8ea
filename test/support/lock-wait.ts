/**
 * Drive a race with a lock deterministically (postgres only): hold a transaction that changes or deletes rows,
 * fire a call that must wait for those rows' locks, wait until its statement is blocked by the holder, then commit
 * the holder — so the call acts on what the holder committed, after its wait.
 *
 *   const outcome = await afterLockWait(admin, (tx) => tx`DELETE FROM ...`, () => client.retry(runId));
 */
import type postgres from '@palisade/engine/postgres';
import { pollFor } from './wait.js';

/** How `call` settled: its value, or the error it threw. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

/**
 * Run `hold` in a transaction of `admin`, then start `call`; once a backend waits for a lock this transaction
 * holds (within `timeoutMs`, default 10 s: more for a call that starts a process), commit, and resolve with how
 * `call` settled.
 */
export async function afterLockWait<T>(
  admin: postgres.Sql,
  hold: (tx: postgres.TransactionSql) => Promise<unknown>,
  call: () => Promise<T>,
  { timeoutMs = 10_000 }: { timeoutMs?: number } = {},
): Promise<Settled<T>> {
  let settled: Promise<Settled<T>> | undefined;
  await admin.begin(async (tx) => {
    await hold(tx);
    settled = call().then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    await pollFor(
      'the call to wait for a lock the holder has',
      async () => {
        await tx`SELECT pg_stat_clear_snapshot()`;
        const [blocked] = await tx<{ pid: number }[]>`
        SELECT pid FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))`;
        return blocked;
      },
      timeoutMs,
    );
  });
  return settled!;
}
