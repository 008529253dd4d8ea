/**
 * postgres.js 3.4.9 throws an uncaught TypeError from `nextWrite` when a query is written to a connection whose
 * backend the server has ended (porsager/postgres#1154, #1208): the process dies, and no try/catch can stop it.
 * Workers meet exactly that under `pg_terminate_backend`, a database restart or an idle-in-transaction timeout,
 * so the engine ships a patched copy of the driver (packages/engine/vendor/postgres, exported as
 * `@palisade/engine/postgres`) that rejects with CONNECTION_CLOSED instead, and opens all its own connections with
 * it. The check runs in a child process, where an uncaught exception shows as the exit code; the packed-install
 * test (test/install/) runs the same script against the installed package.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import postgres from '@palisade/engine/postgres';
import { describe, expect, it } from 'vitest';
import { CLOSED_SOCKET_EXPECTED, closedSocketScript } from '../support/closed-socket-script.js';
import { useTestDatabase } from '../support/postgres.js';

const TEST_ROOT = fileURLToPath(new URL('..', import.meta.url));

const SCRIPT = closedSocketScript('@palisade/engine/postgres');

/**
 * Terminate backend `pid` once it runs a `pg_sleep` (the server shows no event to wait on: bounded polling of
 * pg_stat_activity).
 */
async function terminateInSleep(admin: postgres.Sql, pid: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const [active] =
      await admin`SELECT 1 AS one FROM pg_stat_activity WHERE pid = ${pid} AND query LIKE '%pg_sleep%'`;
    if (active) break;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  await admin`SELECT pg_terminate_backend(${pid})`;
}
describe('postgres.js on a connection the server ended', () => {
  const url = useTestDatabase();

  it('rejects later queries on a reserved connection with CONNECTION_CLOSED instead of crashing the process', async () => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', SCRIPT, url()], {
      cwd: TEST_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(stderr).not.toContain('TypeError');
    expect(code, stderr).toBe(0);
    const seen = JSON.parse(stdout.trim()) as string[];
    expect(seen).toEqual(CLOSED_SOCKET_EXPECTED);
  });

  it("does not raise a terminated session's 57P01 again on the first query of the reconnected connection", async () => {
    // The server sends ErrorResponse 57P01 and hangs up without ReadyForQuery; unpatched, the error stayed on the
    // connection object and failed the next query after the reconnect (in the chaos suite's T5: an attempt's
    // fenced transaction, long after the statement whose session was terminated).
    const admin = postgres(url(), { max: 1, onnotice: () => undefined });
    const sql = postgres(url(), { max: 1, onnotice: () => undefined });
    try {
      const [row] = await sql<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`;
      const slow = sql`SELECT pg_sleep(5)`.then(
        () => 'ok',
        (error: { code?: string }) => error.code,
      );
      const pid = row?.pid ?? 0;
      // Terminate it mid-statement: once the server runs the pg_sleep (bounded polling).
      await terminateInSleep(admin, pid);
      expect(await slow).toBe('CONNECTION_CLOSED');
      const next = await sql`SELECT 1 AS one`.then(
        (rows) => `ok:${String(rows[0]?.one)}`,
        (error: { code?: string }) => error.code,
      );
      expect(next).toBe('ok:1');
    } finally {
      await Promise.all([admin.end({ timeout: 1 }), sql.end({ timeout: 1 })]);
    }
  });

  it('keeps a terminated transaction off the session the pool opens next for another query', async () => {
    // The server ends a transaction's connection; the pool opens it again at once for a query waiting for a
    // connection. Unpatched, the transaction's ROLLBACK was written into that new session before its startup:
    // the waiting query failed with CONNECTION_CLOSED, or (when a cancelled flush timer was left behind) the
    // StartupMessage never went out and the reconnect hung until connect_timeout — a worker's claim loop stalled
    // for 30 s after a database restart (chaos T11), and a fast shutdown of the server waited on the backend.
    const admin = postgres(url(), { max: 1, onnotice: () => undefined });
    const sql = postgres(url(), { max: 1, onnotice: () => undefined, connect_timeout: 5 });
    try {
      let backend!: (pid: number) => void;
      const pid = new Promise<number>((resolve) => (backend = resolve));
      const inTransaction = sql
        .begin(async (tx) => {
          const [row] = await tx<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`;
          backend(row?.pid ?? 0);
          await tx`SELECT pg_sleep(5)`;
        })
        .then(
          () => 'committed',
          (error: { code?: string }) => error.code,
        );
      const transactionPid = await pid;
      // Waits for the only connection, which the transaction holds.
      const waiting = sql`SELECT 3 AS three`.then(
        (rows) => `ok:${String(rows[0]?.three)}`,
        (error: { code?: string }) => error.code,
      );
      await terminateInSleep(admin, transactionPid);
      expect(await inTransaction).toBe('CONNECTION_CLOSED');
      expect(await waiting).toBe('ok:3');
      const [after] = await sql<{ one: number }[]>`SELECT 1 AS one`;
      expect(after?.one).toBe(1);
    } finally {
      await Promise.all([admin.end({ timeout: 1 }), sql.end({ timeout: 1 })]);
    }
  });
});
