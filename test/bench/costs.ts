/**
 * What a unit of work costs the database: rows written, WAL bytes and round trips per job, per workflow run,
 * per step and per turn, over an engine's lifetime from the end of its migrations until it was closed.
 *
 * - Row writes: n_tup_ins + n_tup_upd + n_tup_del of pg_stat_user_tables, summed over the engine's tables (its
 *   `migrations` table left out), after − before. Exact, because each run has a schema of its own and the
 *   counts are read only once every backend that wrote them has reported them (see {@link waitForBackendsGone}).
 * - WAL bytes: pg_wal_lsn_diff of pg_current_wal_lsn() after and before. Whole server: other sessions' writes
 *   (other people's tests, autovacuum, checkpoints' full-page images) are in it; on a quiet server it is the
 *   engine's.
 * - Round trips: statements the engine's client sent (engine-client.ts), BEGIN and COMMIT included.
 * - Units, from the engine's own tables at the end: jobs = standalone activity runs, workflow runs, steps of
 *   workflow runs, turns = attempts of kind 'turn' (a three-step workflow has four: three that schedule a step
 *   and one that returns). Each per-unit figure is the whole cost divided by that count, so a workflow's "per
 *   step" includes its turns.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type postgres from '@palisade/engine/postgres';
import type { CountedClient } from './engine-client.js';
import { round } from './stats.js';

export type WorkUnit = 'job' | 'workflow run' | 'step' | 'turn';

export interface UnitCost {
  readonly unit: WorkUnit;
  readonly count: number;
  readonly rowWrites: number;
  readonly walBytes: number;
  readonly roundTrips: number;
}

export interface WorkCost {
  readonly rowWrites: number;
  readonly walBytes: number;
  readonly roundTrips: number;
  readonly units: Readonly<Record<WorkUnit, number>>;
  /** The totals divided by each unit that occurred. */
  readonly per: readonly UnitCost[];
}

const BACKEND_EXIT_TIMEOUT_MS = 10_000;
const BACKEND_EXIT_POLL_MS = 10;

/**
 * Resolve once no server backend has `application_name` = `applicationName`, i.e. every connection of a closed
 * client has exited. Why this makes pg_stat_user_tables complete: since PostgreSQL 15 a backend flushes its
 * table counts to shared memory when it goes idle at most once a second (PGSTAT_MIN_INTERVAL), and always when
 * it exits — in a before_shmem_exit callback (pgstat_shutdown_hook), which runs before the on_shmem_exit
 * callback that removes the backend from pg_stat_activity (pgstat_beshutdown_hook). So once the backend is gone
 * from pg_stat_activity, its counts are in. (pg_stat_force_next_flush() only affects the calling backend, so it
 * cannot hurry the engine's; closing the client does not wait for the backends to exit, hence this wait.)
 * @throws Error when a backend is still there after 10 s.
 */
export async function waitForBackendsGone(admin: postgres.Sql, applicationName: string): Promise<void> {
  const deadline = performance.now() + BACKEND_EXIT_TIMEOUT_MS;
  for (;;) {
    const [row] = await admin<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where application_name = ${applicationName}`;
    if ((row?.n ?? 0) === 0) return;
    if (performance.now() > deadline) {
      throw new Error(
        `${row?.n} backend(s) of ${applicationName} still connected ${BACKEND_EXIT_TIMEOUT_MS} ms after the client ended`,
      );
    }
    await sleep(BACKEND_EXIT_POLL_MS);
  }
}

/**
 * n_tup_ins + n_tup_upd + n_tup_del over the tables of `schema` except `migrations`. Read in a transaction that
 * first drops this backend's statistics snapshot (pg_stat_clear_snapshot), so a snapshot cached earlier in a
 * transaction (stats_fetch_consistency = cache) cannot be what is read.
 */
export async function rowWrites(admin: postgres.Sql, schema: string): Promise<number> {
  return admin.begin(async (tx) => {
    await tx`select pg_stat_clear_snapshot()`;
    const [row] = await tx<{ n: string }[]>`
      select coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::text as n
        from pg_stat_user_tables where schemaname = ${schema} and relname <> 'migrations'`;
    return Number(row?.n ?? 0);
  });
}

export async function walLsn(admin: postgres.Sql): Promise<string> {
  const [row] = await admin<{ lsn: string }[]>`select pg_current_wal_lsn()::text as lsn`;
  return row?.lsn ?? '0/0';
}

async function walBytesSince(admin: postgres.Sql, lsn: string): Promise<number> {
  const [row] = await admin<{ n: string }[]>`
    select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn}::pg_lsn)::text as n`;
  return Number(row?.n ?? 0);
}

async function units(admin: postgres.Sql, schema: string): Promise<Record<WorkUnit, number>> {
  const s = `"${schema}"`;
  const [row] = await admin.unsafe<{ jobs: number; runs: number; steps: number; turns: number }[]>(
    `select (select count(*)::int from ${s}.runs where kind = 'activity') as jobs,
            (select count(*)::int from ${s}.runs where kind = 'workflow') as runs,
            (select count(*)::int from ${s}.steps st join ${s}.runs r on r.id = st.run_id
              where r.kind = 'workflow') as steps,
            (select count(*)::int from ${s}.attempts where kind = 'turn') as turns`,
  );
  return {
    job: row?.jobs ?? 0,
    'workflow run': row?.runs ?? 0,
    step: row?.steps ?? 0,
    turn: row?.turns ?? 0,
  };
}

export interface CostWindow {
  /**
   * End the window. Call after the engine was closed and `client` ended: waits for the backends to exit, then
   * reads the counters.
   */
  close(): Promise<WorkCost>;
}

/** Start counting now (after the engine's migrations ran: their catalog and `migrations` writes are not work). */
export async function openCostWindow(
  admin: postgres.Sql,
  client: CountedClient,
  schema: string,
): Promise<CostWindow> {
  const lsn = await walLsn(admin);
  const statements = client.statementsSent();
  const rowsBefore = await rowWrites(admin, schema);
  return {
    async close() {
      await waitForBackendsGone(admin, client.applicationName);
      const walBytes = await walBytesSince(admin, lsn);
      const writes = (await rowWrites(admin, schema)) - rowsBefore;
      const roundTrips = client.statementsSent() - statements;
      const counted = await units(admin, schema);
      const per: UnitCost[] = [];
      for (const [unit, count] of Object.entries(counted) as [WorkUnit, number][]) {
        if (count === 0) continue;
        per.push({
          unit,
          count,
          rowWrites: round(writes / count),
          walBytes: Math.round(walBytes / count),
          roundTrips: round(roundTrips / count),
        });
      }
      return { rowWrites: writes, walBytes, roundTrips, units: counted, per };
    },
  };
}
