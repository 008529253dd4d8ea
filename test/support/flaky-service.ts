/**
 * A downstream service that is down for a while: a real HTTP server on 127.0.0.1 that answers every request
 * with 503 for `outageMs` from the first request it receives, and with 200 afterwards (case F09, a retry storm
 * against a recovering dependency). It records every request, so a test can count the calls made during the
 * outage and per run.
 *
 *   POST /   body: { runId, stepId, attempt }   → 503 during the outage, 200 {} after it
 */
import { createServer } from 'node:http';
import { listenLocally } from './local-http.js';

export interface ServiceCall {
  readonly runId: string;
  readonly attempt: number;
  /** When the request arrived (`Date.now()` of the test process: on one host, comparable with the DB clock). */
  readonly atMs: number;
  readonly status: 503 | 200;
}

export interface FlakyService {
  readonly url: string;
  /** Every request, in arrival order. */
  readonly calls: readonly ServiceCall[];
  /** When the outage began (the first request) and ends; undefined before the first request. */
  outage(): { fromMs: number; untilMs: number } | undefined;
  close(): Promise<void>;
}

export async function createFlakyService({ outageMs }: { outageMs: number }): Promise<FlakyService> {
  const calls: ServiceCall[] = [];
  let fromMs: number | undefined;
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const atMs = Date.now();
      fromMs ??= atMs;
      const status = atMs < fromMs + outageMs ? 503 : 200;
      let body: { runId?: unknown; attempt?: unknown } = {};
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof body;
      } catch {
        // counted all the same
      }
      calls.push({ runId: String(body.runId), attempt: Number(body.attempt), atMs, status });
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(status === 200 ? '{}' : '{"error":"unavailable"}');
    });
  });
  const http = await listenLocally(server, 'flaky service');
  return {
    url: `${http.origin}/`,
    calls,
    outage: () => (fromMs === undefined ? undefined : { fromMs, untilMs: fromMs + outageMs }),
    close: http.close,
  };
}
