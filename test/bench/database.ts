/**
 * The PostgreSQL server the benchmark measures, and the fresh engine schemas each run gets (dropped after it).
 *
 * The server is DATABASE_URL (default: the local postgres://postgres@127.0.0.1:5432/test). When that is not
 * reachable, an embedded PostgreSQL 15 is started through test/support/server.ts and removed at the end; its
 * numbers are then not comparable with a durable server (it runs with fsync and synchronous_commit off).
 */
import { randomBytes } from 'node:crypto';
import postgres from '@palisade/engine/postgres';
import { redact, startPostgresServer, type PostgresServer } from '../support/server.js';
import type { BenchConfig } from './config.js';

export interface BenchServer {
  /** Connection URL of the database the engines use. */
  readonly url: string;
  /** The URL with its password masked, for the report. */
  readonly label: string;
  /** True when the embedded fallback is in use. */
  readonly embedded: boolean;
  /** Why the embedded server is used, when it is. */
  readonly fallbackReason: string | undefined;
  /** A small admin client (schema DDL, stats); ended by `close()`. */
  readonly admin: postgres.Sql;
  /** Fresh, unused schema name with a recognisable prefix; register it for cleanup. */
  newSchema(prefix: string): string;
  /** Drop a schema made by `newSchema` (idempotent). */
  dropSchema(schema: string): Promise<void>;
  /**
   * Run `cleanup` at `close()`, before the schemas are dropped (also when the run is interrupted: run.ts closes
   * the server on SIGINT/SIGTERM). @returns a function that unregisters it (call it once the scenario cleaned up
   * itself).
   */
  defer(cleanup: () => Promise<void>): () => void;
  /** Run the deferred cleanups, drop any schema still registered, end the admin client, stop an embedded server. */
  close(): Promise<void>;
}

const CONNECT_TIMEOUT_S = 3;

async function reachable(url: string): Promise<string | undefined> {
  const sql = postgres(url, { max: 1, connect_timeout: CONNECT_TIMEOUT_S, onnotice: () => undefined });
  try {
    await sql`select 1`;
    return undefined;
  } catch (error) {
    return (error as Error).message;
  } finally {
    await sql.end({ timeout: 1 }).catch(() => undefined);
  }
}

/**
 * The server to measure, by the one precedence of the engine, CLI and tests: DATABASE_URL if set (an unreachable
 * one is an error, never silently replaced), else an embedded PostgreSQL server started here.
 */
export async function openBenchServer(config: BenchConfig): Promise<BenchServer> {
  let url = config.databaseUrl;
  let embedded: PostgresServer | undefined;
  let fallbackReason: string | undefined;
  if (url !== undefined) {
    const problem = await reachable(url);
    if (problem !== undefined)
      throw new Error(`bench: DATABASE_URL ${redact(url)} is unreachable (${problem})`);
  } else {
    fallbackReason = 'DATABASE_URL is not set';
    process.stderr.write(`bench: ${fallbackReason}; starting an embedded PostgreSQL\n`);
    embedded = await startPostgresServer();
    url = embedded.adminUrl;
  }
  const admin = postgres(url, { max: 2, onnotice: () => undefined });
  const live = new Set<string>();
  const cleanups = new Set<() => Promise<void>>();
  const dropSchema = async (schema: string): Promise<void> => {
    await admin.unsafe(`drop schema if exists "${schema}" cascade`);
    live.delete(schema);
  };
  return {
    url,
    label: redact(url),
    embedded: embedded !== undefined,
    fallbackReason,
    admin,
    newSchema(prefix) {
      const schema = `bench_${prefix}_${randomBytes(4).toString('hex')}`;
      live.add(schema);
      return schema;
    },
    dropSchema,
    defer(cleanup) {
      cleanups.add(cleanup);
      return () => cleanups.delete(cleanup);
    },
    async close() {
      try {
        for (const cleanup of [...cleanups]) {
          cleanups.delete(cleanup);
          await cleanup().catch((error: unknown) =>
            process.stderr.write(`bench: cleanup failed: ${(error as Error).message}\n`),
          );
        }
        for (const schema of [...live]) await dropSchema(schema).catch(() => undefined);
        await admin.end({ timeout: 5 });
      } finally {
        await embedded?.stop();
      }
    },
  };
}
