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

/** The advisory lock key a `grants` hold ({@link lockRow}) waits on. */
const GRANT_HOLD_KEY = 7_205_981_001;

/**
 * Install, once per scenario schema, what a `grants` hold ({@link lockRow}) needs: a table naming the runs whose
 * grants are held, and a trigger on `steps` that makes a grant to a step of such a run wait on the admin's advisory
 * lock. Call it in the scenario's setup, while no worker is stopped: creating a trigger takes a lock on `steps`
 * that waits for every open transaction writing it — a worker frozen (SIGSTOP) inside one would hold it forever,
 * and with it every later write to `steps` queued behind the DDL. A hold itself writes one row and no DDL.
 */
export async function installGrantHold(ctx: ScenarioContext): Promise<void> {
  const q = `"${ctx.schema}"`;
  await ctx.sql.unsafe(`CREATE TABLE IF NOT EXISTS ${q}.chaos_grant_holds (run_id uuid PRIMARY KEY)`);
  await ctx.sql.unsafe(
    `CREATE OR REPLACE FUNCTION ${q}.chaos_hold_grant() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF EXISTS (SELECT 1 FROM ${q}.chaos_grant_holds WHERE run_id = NEW.run_id) THEN
         PERFORM pg_advisory_xact_lock_shared(${GRANT_HOLD_KEY});
       END IF;
       RETURN NEW;
     END $$`,
  );
  await ctx.sql.unsafe(`DROP TRIGGER IF EXISTS chaos_hold_grant ON ${q}.steps`);
  await ctx.sql.unsafe(
    `CREATE TRIGGER chaos_hold_grant BEFORE INSERT OR UPDATE OF fencing_token ON ${q}.steps FOR EACH ROW
       WHEN (NEW.fencing_token IS NOT NULL) EXECUTE FUNCTION ${q}.chaos_hold_grant()`,
  );
}

/**
 * Hold a lock in an admin transaction until `release()` is called: a row's, or (`table` 'grants') the next grant
 * of a token to a step of step `id`'s run — a claim of one of its steps, or a turn commit inserting one granted
 * eagerly — held in its statement, after that statement's own locks: the trigger {@link installGrantHold} made
 * (which must have run on this schema) waits in that statement for an advisory lock the admin transaction holds,
 * for the runs named in its table. (A claim never waits on a row lock: it skips locked steps, so a wait inside its
 * write is what holds it in flight. Before migration 0029 the unique index entries of the next tokens did, on
 * uncommitted attempt rows; no attempt row is written at a grant now.)
 * @throws when `table` is 'grants' and {@link installGrantHold} has not run on the schema, or step `id` is unknown.
 */
export async function lockRow(
  ctx: ScenarioContext,
  table: 'runs' | 'steps' | 'grants',
  id: string,
): Promise<{ release(): Promise<void> }> {
  const q = `"${ctx.schema}"`;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  let heldRun: string | undefined;
  const done = ctx.sql
    .begin(async (tx) => {
      if (table === 'grants') {
        const [installed] = await tx.unsafe<{ ok: boolean }[]>(
          `SELECT to_regclass('${q}.chaos_grant_holds') IS NOT NULL AS ok`,
        );
        if (!installed?.ok) throw new Error(`lockRow grants: installGrantHold has not run on ${ctx.schema}`);
        await tx.unsafe(`SELECT pg_advisory_xact_lock(${GRANT_HOLD_KEY})`);
        // Committed on its own (outside this transaction), so the worker's statements see it.
        const [step] = await ctx.sql.unsafe<{ run_id: string }[]>(
          `INSERT INTO ${q}.chaos_grant_holds (run_id) SELECT run_id FROM ${q}.steps WHERE id = $1
           ON CONFLICT DO NOTHING RETURNING run_id::text`,
          [id],
        );
        if (!step) throw new Error(`lockRow grants: no step ${id} (or its run is held already)`);
        heldRun = step.run_id;
      } else await tx.unsafe(`SELECT 1 FROM ${q}.${table} WHERE id = $1 FOR UPDATE`, [id]);
      locked();
      await released;
      if (heldRun !== undefined)
        await ctx.sql.unsafe(`DELETE FROM ${q}.chaos_grant_holds WHERE run_id = $1`, [heldRun]);
      if (table === 'grants') throw new RolledBack();
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
    lock: { table: 'runs' | 'steps' | 'grants'; id: string };
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
