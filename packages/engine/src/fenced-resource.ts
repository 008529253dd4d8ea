import type { PGlite, Transaction as PgliteTransaction } from '@electric-sql/pglite';
import { InvalidOptionsError, LeaseLostError } from '@palisade/sdk';
import { checkText } from '@palisade/sdk/internal';
import type { Sql, TransactionSql } from '../vendor/postgres/index.js';
import { quoteIdent, quoteLiteral } from './db/database.js';

/** Where the fences live: a postgres.js client, or a PGlite instance (the embedded database). */
export type FencedResourceOptions = (
  | {
      /** A postgres.js client on the database that holds the resource's own data. */
      readonly sql: Sql;
      readonly pglite?: never;
    }
  | {
      /** A PGlite instance (one connection; transactions are serialized by PGlite). */
      readonly pglite: PGlite;
      readonly sql?: never;
    }
) & {
  /** Schema of the fences table. @defaultValue `'palisade'` (the engine's; created by `install` if absent) */
  readonly schema?: string;
  /** Fences table name. @defaultValue `'fences'` */
  readonly table?: string;
  /**
   * How long a `write` or `accept` transaction may sit idle on the server (ms; postgres.js only): while it runs it
   * holds its scope's row, so a writer frozen inside it (a stopped process, a partition) would hold every later
   * writer of the scope — its successor included — until it resumed. Past this the server ends its idle session
   * and the frozen write is rolled back. The fence sets the timeout in the message that takes the row, so the row
   * is never held without it, and its own statements never leave the server waiting in the middle of a request.
   *
   * Idle means waiting for the client's next request: PostgreSQL (before 17's `transaction_timeout`) sets no limit
   * on a session that waits in the middle of one. Upstream postgres.js sends a statement with parameters that the
   * connection has not prepared yet (every such statement, with `prepare: false`) in two steps — Parse and
   * Describe, then Bind and Execute once the server has answered — so a writer frozen between the two steps of one
   * of your callback's statements is not idle to the server (the engine's own client, `@palisade/engine/postgres`,
   * leaves the server idle there). The next writer of the scope ends it instead: a fence that has waited this long
   * for the row looks up the transaction holding it, and if that session has been waiting for its client (in the
   * middle of a statement, or idle in its transaction) for longer than this, ends it with `pg_terminate_backend`,
   * then takes the row; so a writer waits about this long per frozen holder. Ending a session of another role needs
   * membership in it or in `pg_signal_backend`; after one refusal this resource stops trying (for every scope), and
   * a writer frozen mid-statement then holds the row until it resumes or its connection breaks — writers frozen
   * while idle are still ended by the server.
   *
   * A frozen writer that resumes before this passes still commits: its token was the highest when it took the row.
   * Keep it shorter than the lease of the attempts that write, so that a holder the engine has given up on is ended
   * before its successor would wait on it. `0` disables all of it (the server's timeout, the wait limit and ending
   * stalled holders). Must be longer than any pause your `write` callback makes between its statements.
   * @defaultValue 60_000
   */
  readonly idleInTransactionTimeoutMs?: number;
};

/** A fencing token as handed to external systems (`ctx.info.fencing`). */
export interface FencingToken {
  readonly scope: string;
  readonly token: bigint;
}

/**
 * A resource that refuses stale writers (Kleppmann's fencing tokens; research I18): it records, per scope, the
 * highest token it has accepted, and accepts a write only with a token at least that high. Use it in any Node
 * service that has a Postgres connection — the fences live in one small table, by default the engine's own
 * `fences`. `Tx` is the driver's transaction: postgres.js `TransactionSql`, or PGlite's `Transaction`.
 */
export interface FencedResource<Tx = TransactionSql> {
  /** Create the schema and the fences table if they do not exist (not needed on the engine's database). */
  install(): Promise<void>;
  /**
   * Run `write(tx)` in one transaction with the fence check: the scope's row is locked, the token compared and
   * raised, and the write committed only if `token ≥` the highest accepted so far. Equal tokens are accepted
   * (one attempt may write many times).
   * @throws LeaseLostError (operation `fenced-resource`) with the stale and current token; nothing is written.
   */
  write<T>(fencing: FencingToken, write: (tx: Tx) => Promise<T>): Promise<T>;
  /** Check and record a token without writing anything else. @throws LeaseLostError as {@link write}. */
  accept(fencing: FencingToken): Promise<void>;
  /** The highest token accepted for `scope`, or null. */
  highest(scope: string): Promise<bigint | null>;
}

/** One parameterized statement, its rows back. */
type Query = <R>(text: string, params: readonly string[]) => Promise<R[]>;

/** Statements without parameters, separated by `;`, sent as one message: the rows of each, in order. */
type Script = (text: string) => Promise<Record<string, unknown>[][]>;

/** What the fence needs of a driver. */
interface FenceDriver<Tx> {
  readonly query: Query;
  exec(text: string): Promise<void>;
  transaction<T>(fn: (tx: Tx, script: Script) => Promise<T>): Promise<T>;
}

function postgresDriver(sql: Sql): FenceDriver<TransactionSql> {
  // Without parameters postgres.js sends the text as one Query message (the simple protocol), answered in one go;
  // several statements come back as one result each.
  const script =
    (tx: TransactionSql): Script =>
    async (text) => {
      const results = (await tx.unsafe(text)) as unknown as unknown[];
      return (Array.isArray(results[0]) ? results : [results]) as Record<string, unknown>[][];
    };
  return {
    query: async <R>(text: string, params: readonly string[]) =>
      [...(await sql.unsafe(text, [...params]))] as R[],
    exec: async (text) => void (await sql.unsafe(text)),
    transaction: async <T>(fn: (tx: TransactionSql, script: Script) => Promise<T>) =>
      (await sql.begin((tx) => fn(tx, script(tx)))) as T,
  };
}

function pgliteDriver(pglite: PGlite): FenceDriver<PgliteTransaction> {
  return {
    query: async <R>(text: string, params: readonly string[]) =>
      (await pglite.query<R>(text, [...params])).rows,
    exec: async (text) => void (await pglite.exec(text)),
    transaction: (fn) =>
      pglite.transaction((tx) =>
        fn(tx, async (text) => (await tx.exec(text)).map((r) => r.rows as Record<string, unknown>[])),
      ),
  };
}

/**
 * A {@link FencedResource} on the given database (postgres.js `sql` or PGlite `pglite`).
 * @throws InvalidOptionsError when neither or both are given.
 */
export function createFencedResource(
  options: FencedResourceOptions & { readonly sql: Sql },
): FencedResource<TransactionSql>;
export function createFencedResource(
  options: FencedResourceOptions & { readonly pglite: PGlite },
): FencedResource<PgliteTransaction>;
export function createFencedResource(
  options: FencedResourceOptions,
): FencedResource<TransactionSql> | FencedResource<PgliteTransaction> {
  if ((options.sql === undefined) === (options.pglite === undefined))
    throw new InvalidOptionsError('createFencedResource options', [
      { path: 'sql', message: 'give exactly one of `sql` (postgres.js) and `pglite`' },
    ]);
  return options.sql !== undefined
    ? fencedResource(postgresDriver(options.sql), options)
    : fencedResource(pgliteDriver(options.pglite), options);
}

/**
 * End the session holding `scope`'s row when it has waited for its client for more than idleMs — in the middle
 * of a statement (which `idle_in_transaction_session_timeout` does not count) or idle in its transaction — so
 * that its transaction rolls back and the row is free. A committed row names its holder: the locker in its
 * `xmax` (the holder's transaction id). A row not committed yet (the scope's first write) is invisible to other
 * sessions, so its holder is looked for among the sessions stalled in the middle of a statement in a
 * transaction that wrote the fences table — each of them past the limit this resource sets its own writers.
 * @returns false when the role may not end other sessions (preemption is then off: fences wait as long as it takes).
 */
async function endStalledHolder<Tx>(
  driver: FenceDriver<Tx>,
  table: string,
  scope: string,
  idleMs: number,
): Promise<boolean> {
  try {
    await driver.query(
      `SELECT pg_terminate_backend(a.pid)
         FROM pg_stat_activity a
        WHERE a.pid <> pg_backend_pid() AND a.backend_xid IS NOT NULL
          AND a.state_change < clock_timestamp() - $2::int * interval '1 millisecond'
          AND ((a.state = 'active' AND a.wait_event = 'ClientRead') OR a.state = 'idle in transaction')
          AND (a.backend_xid = (SELECT f.xmax FROM ${table} f WHERE f.scope = $1)
               OR (NOT EXISTS (SELECT 1 FROM ${table} f WHERE f.scope = $1)
                   AND a.state = 'active'
                   AND EXISTS (SELECT 1 FROM pg_locks l
                                WHERE l.pid = a.pid AND l.granted AND l.mode = 'RowExclusiveLock'
                                  AND l.relation = to_regclass(${quoteLiteral(table)}))))`,
      [scope, String(idleMs)],
    );
  } catch (error) {
    if ((error as { code?: unknown }).code !== '42501') throw error; // insufficient_privilege
    return false;
  }
  return true;
}

function fencedResource<Tx>(
  driver: FenceDriver<Tx>,
  options: {
    readonly schema?: string;
    readonly table?: string;
    readonly idleInTransactionTimeoutMs?: number;
    readonly pglite?: unknown;
  },
): FencedResource<Tx> {
  const schema = quoteIdent(options.schema ?? 'palisade');
  const table = `${schema}.${quoteIdent(options.table ?? 'fences')}`;
  const idleMs = options.idleInTransactionTimeoutMs ?? 60_000;
  if (!Number.isSafeInteger(idleMs) || idleMs < 0 || idleMs > 2_147_483_647) {
    throw new InvalidOptionsError('createFencedResource options', [
      { path: 'idleInTransactionTimeoutMs', message: 'must be an integer number of ms from 0 to 2147483647' },
    ]);
  }
  // PGlite has one connection in one process: nothing else can be frozen holding the row.
  const idleSetting = options.pglite === undefined && idleMs > 0 ? idleMs : undefined;
  // Whether a fence waits at most idleMs for the row before it looks for a stalled holder (see endStalledHolder);
  // off for good once the role may not end other sessions.
  let preempt = idleSetting !== undefined;
  /** Thrown out of a transaction whose fence waited idleMs for the row (lock_timeout, 55P03). */
  class FenceWaited extends Error {}
  async function check(script: Script, f: FencingToken): Promise<void> {
    // Refused here, not by the database: a scope it cannot store would otherwise come back as a raw driver error
    // (and checkText's refusal of NUL keeps the literal below well formed).
    checkText(f.scope, 'fencing scope');
    if (typeof f.token !== 'bigint' || f.token < 0n) {
      throw new InvalidOptionsError('fencing token', [
        { path: 'token', message: 'must be a non-negative bigint' },
      ]);
    }
    const scope = quoteLiteral(f.scope);
    const waitLimited = preempt;
    // One message, answered as a whole: the timeout (postgres.js), the fence, and the token it leaves. INSERT …
    // ON CONFLICT DO UPDATE … WHERE locks the scope's row whether it accepts or refuses; a concurrent higher token
    // waits for our commit and then wins, a lower one sees ours and is refused. The SELECT, with a snapshot of its
    // own (read committed), sees the token that refused us.
    // Literals, not parameters: postgres.js sends a statement with parameters that its connection has not prepared
    // in two steps (Parse and Describe; Bind and Execute once answered), and between them the server waits for the
    // client without counting it idle. A refused writer frozen there, reading the token that refused it, held the
    // row past its timeout until it resumed.
    // The fence waits at most idleMs for the row (lock_timeout, put back to the session's own value right after,
    // so the callback's statements never inherit it); a fence that ran out of it ends a stalled holder and tries
    // again (see write).
    let results: Record<string, unknown>[][];
    try {
      results = await script(
        [
          ...(idleSetting === undefined
            ? []
            : [`SELECT set_config('idle_in_transaction_session_timeout', '${idleSetting}', true)`]),
          ...(waitLimited
            ? [
                `SELECT set_config('palisade.fence_lock_timeout', current_setting('lock_timeout'), true),
                        set_config('lock_timeout', '${idleMs}', true)`,
              ]
            : []),
          `INSERT INTO ${table} (scope, token, updated_at) VALUES (${scope}, ${f.token}::bigint, clock_timestamp())
           ON CONFLICT (scope) DO UPDATE SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at
            WHERE ${table}.token <= EXCLUDED.token
           RETURNING token::text`,
          ...(waitLimited
            ? [`SELECT set_config('lock_timeout', current_setting('palisade.fence_lock_timeout'), true)`]
            : []),
          `SELECT token::text FROM ${table} WHERE scope = ${scope}`,
        ].join(';\n'),
      );
    } catch (error) {
      if (waitLimited && (error as { code?: unknown }).code === '55P03') throw new FenceWaited();
      throw error;
    }
    const accepted = results[results.length - (waitLimited ? 3 : 2)];
    const current = results[results.length - 1];
    if (accepted === undefined || accepted.length === 0) {
      const token = current?.[0]?.token;
      throw new LeaseLostError({
        operation: 'fenced-resource',
        stepLabel: f.scope,
        staleToken: f.token,
        currentToken: typeof token === 'string' ? BigInt(token) : null,
        reason: 'superseded',
      });
    }
  }
  /** `run` in a transaction whose fence, having waited idleMs for the row, ends a stalled holder and starts over. */
  async function fenced<T>(scope: string, run: () => Promise<T>): Promise<T> {
    for (;;) {
      try {
        return await run();
      } catch (error) {
        if (!(error instanceof FenceWaited)) throw error;
        preempt = await endStalledHolder(driver, table, scope, idleMs);
      }
    }
  }
  return {
    install: () =>
      driver.exec(
        `CREATE SCHEMA IF NOT EXISTS ${schema};
         CREATE TABLE IF NOT EXISTS ${table} (scope text PRIMARY KEY, token bigint NOT NULL, updated_at timestamptz NOT NULL)`,
      ),
    write: <T>(fencing: FencingToken, write: (tx: Tx) => Promise<T>) =>
      fenced(fencing.scope, () =>
        driver.transaction(async (tx, script) => {
          await check(script, fencing);
          return write(tx);
        }),
      ),
    accept: (fencing) =>
      fenced(fencing.scope, () => driver.transaction((_tx, script) => check(script, fencing))),
    async highest(scope) {
      const rows = await driver.query<{ token: string }>(
        `SELECT token::text FROM ${table} WHERE scope = $1`,
        [scope],
      );
      return rows[0] ? BigInt(rows[0].token) : null;
    },
  };
}
