/**
 * A payment provider stand-in: a real HTTP server on 127.0.0.1 that charges at most once per idempotency key,
 * as real providers do (`Idempotency-Key` header). It records every request, so a test can tell "the zombie
 * never called" apart from "the zombie called and was deduplicated".
 *
 *   POST /charges   headers: idempotency-key   body: { amountCents, token, workerId }
 *     → 201 { chargeId, replayed: false } the first time, 200 { chargeId, replayed: true } for a known key
 */
import { createServer, type IncomingMessage } from 'node:http';
import { listenLocally } from './local-http.js';

export interface ChargeRequest {
  readonly key: string;
  readonly amountCents: number;
  /** The fencing token the caller sent (decimal). */
  readonly token: string;
  readonly workerId: string;
  readonly replayed: boolean;
}

export interface Charge {
  readonly key: string;
  readonly chargeId: string;
  readonly amountCents: number;
  /** Token of the request that created the charge. */
  readonly token: string;
  readonly workerId: string;
}

export interface PaymentStub {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string;
  /** Every accepted POST /charges, in arrival order (replays included). */
  readonly requests: readonly ChargeRequest[];
  /** The charges made: one per idempotency key. */
  charges(): Charge[];
  close(): Promise<void>;
}

async function readJson(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
}

export async function createPaymentStub(): Promise<PaymentStub> {
  const requests: ChargeRequest[] = [];
  const charges = new Map<string, Charge>();
  const server = createServer((request, response) => {
    const reply = (status: number, body: unknown): void => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    if (request.method !== 'POST' || request.url !== '/charges') return reply(404, { error: 'not found' });
    const key = request.headers['idempotency-key'];
    if (typeof key !== 'string' || key === '')
      return reply(400, { error: 'idempotency-key header required' });
    readJson(request).then(
      (raw) => {
        const body = raw as { amountCents?: unknown; token?: unknown; workerId?: unknown };
        const amountCents = Number(body.amountCents);
        const token = String(body.token);
        const workerId = String(body.workerId);
        const existing = charges.get(key);
        requests.push({ key, amountCents, token, workerId, replayed: existing !== undefined });
        if (existing) return reply(200, { chargeId: existing.chargeId, replayed: true });
        const charge = { key, chargeId: `ch_${charges.size + 1}`, amountCents, token, workerId };
        charges.set(key, charge);
        reply(201, { chargeId: charge.chargeId, replayed: false });
      },
      () => reply(400, { error: 'body must be JSON' }),
    );
  });
  const http = await listenLocally(server, 'payment stub');
  return {
    url: http.origin,
    requests,
    charges: () => [...charges.values()],
    close: http.close,
  };
}
