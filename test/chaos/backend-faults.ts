/**
 * Database-side faults for chaos scenarios: hold a row lock in an admin transaction so that a worker's statement
 * waits on it (in flight, in the database), and find — or terminate — the worker's backend that waits there.
 * Used by T5 (./scenarios/t05-backend-termination.ts), the batched-completion scenarios (T16, T18) and the eager
 * and fused ones (T22, T24).
 */
import type { ScenarioContext } from './harness.js';

/** A fragment of the completion statement (queries/complete-step.ts) as `pg_stat_activity.query` shows it. */
export const COMPLETION_STATEMENT = `%SET status = 'completed', output%`;

/** `databaseUrl` with `application_name` set, so the worker's sessions can be told apart (the engine keeps it). */
export function withApplicationName(databaseUrl: string, applicationName: string): string {
  const url = new URL(databaseUrl);
  url.searchParams.set('application_name', applicationName);
  return url.toString();
}

class RolledBack extends Error {}

/**
 * Hold a lock in an admin transaction until `release()` is called: a row's, or (`table` 'attempts') the unique
 * index entries of the next few fencing tokens, on uncommitted attempt rows of step `id` (rolled back after).
 */
export async function lockRow(
  ctx: ScenarioContext,
  table: 'runs' | 'steps' | 'attempts',
  id: string,
): Promise<{ release(): Promise<void> }> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  const done = ctx.sql
    .begin(async (tx) => {
      const q = `"${ctx.schema}"`;
      if (table === 'attempts') {
        await tx.unsafe(
          `INSERT INTO ${q}.attempts (run_id, step_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at)
         SELECT s.run_id, s.id, 'activity', 0, 0, t.token, gen_random_uuid(), 'operator:t5', now()
           FROM ${q}.steps s, (SELECT nextval('${q}.fencing_token_seq') + k AS token FROM generate_series(1, 3) k) t
          WHERE s.id = $1`,
          [id],
        );
      } else await tx.unsafe(`SELECT 1 FROM ${q}.${table} WHERE id = $1 FOR UPDATE`, [id]);
      locked();
      await released;
      if (table === 'attempts') throw new RolledBack();
    })
    .catch((error: unknown) => {
      if (!(error instanceof RolledBack)) throw error;
    });
  await Promise.race([isLocked, done]);
  return {
    release: async () => {
      release();
      await done;
    },
  };
}

/**
 * The pid of a backend of `applicationName` waiting on a lock while running a statement LIKE `pattern` (bounded
 * polling); with `terminate`, that backend is terminated (`pg_terminate_backend`) in the same query.
 * @throws when there is none within `timeoutMs`.
 */
export async function waitingBackend(
  ctx: ScenarioContext,
  o: { applicationName: string; pattern: string; terminate: boolean; timeoutMs: number },
): Promise<number> {
  return ctx.poll(
    `a backend of ${o.applicationName} waiting in ${o.pattern}`,
    async () => {
      const [row] = await ctx.sql.unsafe<{ pid: number; done: boolean }[]>(
        `SELECT pid, CASE WHEN $3::boolean THEN pg_terminate_backend(pid) ELSE true END AS done FROM pg_stat_activity
          WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2 LIMIT 1`,
        [o.applicationName, o.pattern, o.terminate],
      );
      return row?.done ? row.pid : undefined;
    },
    o.timeoutMs,
  );
}

/**
 * Hold a lock (see {@link lockRow}) while `release()` lets a statement the worker holds go, so that it waits on
 * that lock in the database, and terminate its backend there (found by `applicationName` and the statement's
 * `pattern`, within 5 s); the lock is released after. Done, the fault `fault` (if given) is counted; not finding
 * the backend is a failed expectation under `label`.
 */
export async function terminateWhileLocked(
  ctx: ScenarioContext,
  o: {
    lock: { table: 'runs' | 'steps' | 'attempts'; id: string };
    backend: { applicationName: string; pattern: string };
    release: () => void;
    label: string;
    fault?: string;
  },
): Promise<void> {
  const lock = await lockRow(ctx, o.lock.table, o.lock.id);
  try {
    o.release();
    await waitingBackend(ctx, { ...o.backend, terminate: true, timeoutMs: 5_000 });
    if (o.fault !== undefined) ctx.fault(o.fault);
  } catch (error) {
    ctx.expect(false, `${o.label}: ${(error as Error).message}`);
  } finally {
    await lock.release();
  }
}
