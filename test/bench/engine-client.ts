/**
 * The postgres.js client each benchmark engine runs on, made here (and passed as `createEngine({ sql })`) so that
 * the bench can count the statements the engine sends and find the engine's server backends.
 *
 * Round trips are counted with the driver's `debug` hook, which postgres.js calls once for every statement it
 * sends (connection.js `build`): tagged and `unsafe` calls alike, the BEGIN and COMMIT of every transaction, the
 * LISTEN, the heartbeat client's statements (the engine makes that client from `client.options`, hook included)
 * and the driver's own type lookup on a new connection. Each statement ends with its own Sync, i.e. costs one
 * ReadyForQuery from the server: one round trip. Not counted: the extra wait of a parameterised statement's first
 * run on a connection (the driver describes it before binding; once per connection and statement text, not per
 * item) and connection start-up. The hook is one closure call and an increment per statement; the engine's own
 * code is untouched (no wrapper on the hot path).
 *
 * Every connection carries `application_name` = the engine's schema, which is unique per run, so the bench can
 * tell this engine's backends from everyone else's on a shared server (see `waitForBackendsGone`).
 */
import postgres from '@palisade/engine/postgres';
import { ENGINE_DEFAULTS } from '@palisade/engine';

export interface CountedClient {
  /** Pass as `createEngine({ sql })`; the engine never ends it, {@link CountedClient.end} does. */
  readonly sql: postgres.Sql;
  /** `application_name` of every connection of this client (and of the heartbeat client the engine derives). */
  readonly applicationName: string;
  /** Statements sent so far (one round trip each). */
  statementsSent(): number;
  end(): Promise<void>;
}

/**
 * A pool with the settings the engine gives its own pool for a `databaseUrl` (engine.ts `openDatabase`): `max` =
 * `poolSize`, the default statement and lock timeouts, notices dropped. The engine's reconnect backoff is not
 * exported and only matters after a connection is lost, which the benchmark does not do.
 */
export function openCountedClient(url: string, options: { poolSize: number; applicationName: string }) {
  let sent = 0;
  const sql = postgres(url, {
    max: options.poolSize,
    onnotice: () => undefined,
    debug: () => {
      sent++;
    },
    connection: {
      application_name: options.applicationName,
      statement_timeout: ENGINE_DEFAULTS.statementTimeoutMs,
      lock_timeout: ENGINE_DEFAULTS.lockTimeoutMs,
    },
  });
  const client: CountedClient = {
    sql,
    applicationName: options.applicationName,
    statementsSent: () => sent,
    end: () => sql.end({ timeout: 5 }),
  };
  return client;
}
