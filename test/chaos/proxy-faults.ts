/**
 * Network-side faults for chaos scenarios. A worker reaches the server through its own TCP proxy
 * ({@link spawnBehindProxy}), which can cut, delay or drop what crosses it; for a lost reply — a statement the
 * server runs and commits whose reply never reaches the worker, and then the connection dies, as a network failure
 * after the commit would — the proxy is armed with `dropReplyAfter(marker)`, and these helpers wait for the rule to
 * trip and end the fault. Used by T6, T7, T13, T25 and the lost-reply scenarios (T19, T23, T24).
 */
import { unprepared, type TcpProxy } from '../support/tcp-proxy.js';
import type { WorkerProcess } from '../support/worker-process.js';
import type { ScenarioContext, SpawnOptions } from './harness.js';

/**
 * A worker process whose connections go through a TCP proxy of its own; `unprepared`: with `prepare=false`, so
 * that every statement (a COMMIT too) crosses the proxy as text a marker can find.
 */
export async function spawnBehindProxy(
  ctx: ScenarioContext,
  options: SpawnOptions & { unprepared?: boolean } = {},
): Promise<{ proxy: TcpProxy; worker: WorkerProcess }> {
  const { unprepared: asText, ...spawn } = options;
  const proxy = await ctx.proxy();
  const url = proxy.url(ctx.databaseUrl);
  const worker = await ctx.spawnWorker({ ...spawn, databaseUrl: asText ? unprepared(url) : url });
  return { proxy, worker };
}

/**
 * Arm `proxy` to drop the server's reply to the statement carrying `marker`, `send()` it (say, release the
 * completion the worker holds), and wait for the rule to trip: the connection whose reply is dropped. If no
 * statement with the marker crossed the proxy within `timeoutMs`, the fault is off (`proxy` restored), `missed`
 * is a failed expectation, and the result undefined.
 */
export async function dropReply(
  ctx: ScenarioContext,
  proxy: TcpProxy,
  o: { marker: string; send?: () => void; timeoutMs: number; missed: string },
): Promise<number | undefined> {
  const rule = proxy.dropReplyAfter(o.marker);
  o.send?.();
  const connection = await Promise.race([
    rule.tripped,
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), o.timeoutMs).unref()),
  ]);
  if (connection === undefined) {
    proxy.restore();
    ctx.expect(false, o.missed);
  }
  return connection;
}

/** End the fault once the server committed: the proxy forwards again, and the connection is destroyed. */
export function cutConnection(proxy: TcpProxy, connection: number): void {
  proxy.restore();
  proxy.resetConnection(connection);
}
