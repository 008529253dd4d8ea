import { LeaseLostError } from '@palisade/sdk';
import type { Sql, TransactionSql } from 'postgres';
import { quoteIdent } from './db/database.js';

/** Options of {@link createFencedResource}. */
export interface FencedResourceOptions {
  /** A postgres.js client on the database that holds the resource's own data. */
  readonly sql: Sql;
  /** Schema of the fences table. @defaultValue `'palisade'` (the engine's; created if absent) */
  readonly schema?: string;
  /** Fences table name. @defaultValue `'fences'` */
  readonly table?: string;
}

/** A fencing token as handed to external systems (`ctx.info.fencing`). */
export interface FencingToken {
  readonly scope: string;
  readonly token: bigint;
}

/**
 * A resource that refuses stale writers (Kleppmann's fencing tokens; research I18): it records, per scope, the
 * highest token it has accepted, and accepts a write only with a token at least that high. Use it in any Node
 * service that has a Postgres connection — the fences live in one small table, by default the engine's own
 * `fences`.
 */
export interface FencedResource {
  /** Create the fences table if it does not exist (not needed on the engine's database). */
  install(): Promise<void>;
  /**
   * Run `write(tx)` in one transaction with the fence check: the scope's row is locked, the token compared and
   * raised, and the write committed only if `token ≥` the highest accepted so far. Equal tokens are accepted
   * (one attempt may write many times).
   * @throws LeaseLostError (operation `fenced-resource`) with the stale and current token; nothing is written.
   */
  write<T>(fencing: FencingToken, write: (tx: TransactionSql) => Promise<T>): Promise<T>;
  /** Check and record a token without writing anything else. @throws LeaseLostError as {@link write}. */
  accept(fencing: FencingToken): Promise<void>;
  /** The highest token accepted for `scope`, or null. */
  highest(scope: string): Promise<bigint | null>;
}

export function createFencedResource(options: FencedResourceOptions): FencedResource {
  const table = `${quoteIdent(options.schema ?? 'palisade')}.${quoteIdent(options.table ?? 'fences')}`;
  const { sql } = options;
  async function check(tx: TransactionSql, f: FencingToken): Promise<void> {
    // INSERT … ON CONFLICT DO UPDATE … WHERE locks the scope's row; a concurrent higher token waits for our
    // commit and then wins, a lower one sees ours and is refused.
    const rows = await tx.unsafe<{ token: string }[]>(
      `INSERT INTO ${table} (scope, token, updated_at) VALUES ($1, $2::bigint, clock_timestamp())
       ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at
        WHERE ${table}.token <= EXCLUDED.token
       RETURNING token::text`,
      [f.scope, f.token.toString()],
    );
    if (rows.length === 0) {
      const current = await tx.unsafe<{ token: string }[]>(
        `SELECT token::text FROM ${table} WHERE scope = $1`,
        [f.scope],
      );
      throw new LeaseLostError({
        operation: 'fenced-resource',
        stepLabel: f.scope,
        staleToken: f.token,
        currentToken: current[0] ? BigInt(current[0].token) : null,
        reason: 'superseded',
      });
    }
  }
  return {
    async install() {
      await sql.unsafe(
        `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(options.schema ?? 'palisade')};
         CREATE TABLE IF NOT EXISTS ${table} (scope text PRIMARY KEY, token bigint NOT NULL, updated_at timestamptz NOT NULL)`,
      );
    },
    async write<T>(fencing: FencingToken, write: (tx: TransactionSql) => Promise<T>): Promise<T> {
      return (await sql.begin(async (tx) => {
        await check(tx, fencing);
        return write(tx);
      })) as T;
    },
    async accept(fencing: FencingToken): Promise<void> {
      await sql.begin((tx) => check(tx, fencing));
    },
    async highest(scope: string): Promise<bigint | null> {
      const rows = await sql.unsafe<{ token: string }[]>(
        `SELECT token::text FROM ${table} WHERE scope = $1`,
        [scope],
      );
      return rows[0] ? BigInt(rows[0].token) : null;
    },
  };
}
