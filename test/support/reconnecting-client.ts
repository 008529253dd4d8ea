/**
 * A postgres.js client for a test's own statements in a process that rides out a database outage (the chaos
 * suite's worker processes and harness). It reconnects like the engine's own pools (`reconnectBackoffSeconds`:
 * within half a second, jittered), not with postgres.js's default backoff, which grows as 3^n / 100 s up to 20 s
 * per failed connect and counts every failed connect of the pool. With the default, a fixture's statement sent
 * after a restart of a few seconds waited up to 18 s more for its connection (0.8 s with this client; measured by
 * test/bench/reconnect-stall.ts), holding the activity slot it ran in:
 * chaos T26 saw a worker claim nothing for 30 s after the restart while its slots waited on this client.
 */
import { reconnectBackoffSeconds } from '@palisade/engine';
import postgres from '@palisade/engine/postgres';

/** Options of {@link reconnectingClient}: postgres.js's, but for `backoff`, which is the engine's. */
export type ReconnectingClientOptions = Omit<postgres.Options<Record<string, never>>, 'backoff'>;

/** A postgres.js client on `url` that reconnects like the engine's pools; notices are dropped. */
export function reconnectingClient(url: string, options: ReconnectingClientOptions = {}): postgres.Sql {
  return postgres(url, { onnotice: () => undefined, ...options, backoff: reconnectBackoffSeconds });
}
