/**
 * A card processor for the demo, running as a real HTTP server on loopback with its own table. It behaves like
 * the real ones on the point that matters here — idempotency keys: the first request with a key creates a
 * charge; any later request with the same key (a retry, or another worker's attempt at the same invoice) gets
 * the same charge back, marked `Idempotent-Replayed: true`, and creates nothing; the same key with different
 * parameters is refused with 422. Every charge it accepts is a row of `<schema>.charges`.
 *
 * For fault injection it can hold the response to the first request with a given key (the charge is already
 * committed, the answer is slow): {@link PaymentProvider.holdFirstResponse}.
 */
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { ApplicationFailure } from '@palisade/sdk';
import type { AppDatabase } from './app-database.js';
import { CURRENCY_CODES } from './currencies.js';
import { quoteIdent } from './tables.js';

/** A charge as the provider stores and returns it. */
export interface Charge {
  readonly id: string;
  readonly idempotencyKey: string;
  readonly amountMinor: number;
  readonly currency: string;
  readonly customer: string;
  readonly description: string | null;
  /** How many requests presented its idempotency key (1 = never replayed). */
  readonly requestCount: number;
  readonly createdAt: string;
}

/** What `POST /v1/charges` answers. */
export interface ChargeResponse {
  readonly id: string;
  readonly object: 'charge';
  readonly amount: number;
  readonly currency: string;
  readonly customer: string;
  readonly status: 'succeeded';
  readonly created: string;
  /** True when an earlier request with the same idempotency key created this charge. */
  readonly idempotentReplayed: boolean;
}

export interface PaymentProviderEvents {
  'charge:accepted': [{ charge: Charge; replayed: boolean }];
  'response:held': [{ idempotencyKey: string; chargeId: string }];
  'response:released': [{ idempotencyKey: string; chargeId: string }];
}

/** A response the provider holds back; see {@link PaymentProvider.holdFirstResponse}. */
export interface HeldResponse {
  /** Resolves when the first request with the key arrived and its charge was committed. */
  readonly reached: Promise<{ chargeId: string }>;
  /** Send the held response (idempotent; a no-op before it is reached, which then is not held at all). */
  release(): void;
}

const chargeRequest = z
  .object({
    amount: z.number().int().positive(),
    currency: z.enum(CURRENCY_CODES),
    customer: z.string().min(1).max(200),
    description: z.string().max(500).optional(),
  })
  .strict();

const KEY = /^[\x21-\x7e]{1,255}$/;

interface ChargeRow {
  id: string;
  idempotency_key: string;
  amount_minor: string | number;
  currency: string;
  customer: string;
  description: string | null;
  request_count: number;
  created_at: string;
  replayed?: boolean;
}

function toCharge(row: ChargeRow): Charge {
  return {
    id: row.id,
    idempotencyKey: row.idempotency_key,
    amountMinor: Number(row.amount_minor),
    currency: row.currency.trim(),
    customer: row.customer,
    description: row.description,
    requestCount: row.request_count,
    createdAt: row.created_at,
  };
}

function rowsOf<T>(result: unknown): T[] {
  return Array.isArray(result) ? (result as T[]) : ((result as { rows?: T[] }).rows ?? []);
}

export class PaymentProvider {
  readonly events = new EventEmitter<PaymentProviderEvents>();
  private readonly holds = new Map<
    string,
    { reached: (v: { chargeId: string }) => void; released: Promise<void>; release: () => void }
  >();
  private readonly table: string;

  private constructor(
    private readonly database: AppDatabase,
    private readonly server: Server,
    readonly url: string,
    schema: string,
  ) {
    this.table = `${quoteIdent(schema)}.charges`;
  }

  /** Create the provider's table in `schema` (if absent) and listen on 127.0.0.1 (a free port). */
  static async start(options: { database: AppDatabase; schema: string }): Promise<PaymentProvider> {
    const s = quoteIdent(options.schema);
    await options.database.run([
      `CREATE SCHEMA IF NOT EXISTS ${s}`,
      `CREATE TABLE IF NOT EXISTS ${s}.charges (
        id text PRIMARY KEY,
        idempotency_key text NOT NULL UNIQUE,
        amount_minor bigint NOT NULL CHECK (amount_minor > 0),
        currency char(3) NOT NULL,
        customer text NOT NULL,
        description text,
        status text NOT NULL DEFAULT 'succeeded',
        request_count integer NOT NULL DEFAULT 1,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        last_request_at timestamptz NOT NULL DEFAULT clock_timestamp()
      )`,
    ]);
    const holder: { provider?: PaymentProvider } = {};
    const server = createServer((req, res) => {
      void holder.provider?.handle(req, res);
    });
    // Keep-alive sockets must not keep close() waiting.
    server.keepAliveTimeout = 1_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    if (address === null || typeof address === 'string')
      throw new Error('payment provider has no TCP address');
    holder.provider = new PaymentProvider(
      options.database,
      server,
      `http://127.0.0.1:${address.port}`,
      options.schema,
    );
    return holder.provider;
  }

  /**
   * Hold the response to the first request that presents `idempotencyKey`: the charge is created and committed
   * as usual, then the answer waits until `release()` — a slow card network, seen from the caller.
   */
  holdFirstResponse(idempotencyKey: string): HeldResponse {
    let reached!: (v: { chargeId: string }) => void;
    let release!: () => void;
    const reachedPromise = new Promise<{ chargeId: string }>((resolve) => (reached = resolve));
    const released = new Promise<void>((resolve) => (release = resolve));
    this.holds.set(idempotencyKey, { reached, released, release });
    return {
      reached: reachedPromise,
      release: () => {
        release();
        this.holds.delete(idempotencyKey);
      },
    };
  }

  /** Every charge the provider accepted, oldest first. */
  async charges(): Promise<Charge[]> {
    const rows = rowsOf<ChargeRow>(
      await this.database.db.execute(
        sql.raw(`SELECT id, idempotency_key, amount_minor::text AS amount_minor, currency, customer, description,
                        request_count, created_at::text AS created_at
                   FROM ${this.table} ORDER BY created_at, id`),
      ),
    );
    return rows.map(toCharge);
  }

  /** Stop listening (in-flight requests are answered first; held ones are released). */
  async close(): Promise<void> {
    for (const hold of this.holds.values()) hold.release();
    this.holds.clear();
    this.server.closeIdleConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (req.method === 'POST' && req.url === '/v1/charges') return await this.createCharge(req, res);
      const byId = /^\/v1\/charges\/(ch_[A-Za-z0-9]+)$/.exec(req.url ?? '');
      if (req.method === 'GET' && byId) return await this.getCharge(byId[1] as string, res);
      send(res, 404, { error: { type: 'not_found', message: `no route ${req.method} ${req.url}` } });
    } catch (error) {
      send(res, 500, {
        error: { type: 'api_error', message: error instanceof Error ? error.message : String(error) },
      });
    }
  }

  private async createCharge(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || !KEY.test(key)) {
      return send(res, 400, {
        error: {
          type: 'invalid_request',
          message: 'an Idempotency-Key header (1–255 visible ASCII characters) is required',
        },
      });
    }
    let body: unknown;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      return send(res, 400, { error: { type: 'invalid_request', message: 'the body must be JSON' } });
    }
    const parsed = chargeRequest.safeParse(body);
    if (!parsed.success) {
      return send(res, 400, {
        error: {
          type: 'invalid_request',
          message: parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
        },
      });
    }
    const p = parsed.data;
    const id = `ch_${randomBytes(12).toString('base64url').replace(/[-_]/g, 'x')}`;
    // One statement: create the charge, or count one more request for the key. `xmax` tells the two apart
    // (an updated row carries the updating transaction's id); concurrent requests with one key serialize on it.
    const [row] = rowsOf<ChargeRow>(
      await this.database.db.execute(sql`
        INSERT INTO ${sql.raw(this.table)} (id, idempotency_key, amount_minor, currency, customer, description)
        VALUES (${id}, ${key}, ${p.amount}, ${p.currency}, ${p.customer}, ${p.description ?? null})
        ON CONFLICT (idempotency_key) DO UPDATE
          SET request_count = ${sql.raw(this.table)}.request_count + 1, last_request_at = clock_timestamp()
        RETURNING id, idempotency_key, amount_minor::text AS amount_minor, currency, customer, description,
                  request_count, created_at::text AS created_at, (xmax::text <> '0') AS replayed`),
    );
    if (!row) throw new Error('charge upsert returned no row');
    const charge = toCharge(row);
    const replayed = row.replayed === true;
    if (
      replayed &&
      (charge.amountMinor !== p.amount || charge.currency !== p.currency || charge.customer !== p.customer)
    ) {
      return send(res, 422, {
        error: {
          type: 'idempotency_error',
          message: `Idempotency-Key ${key} was first used with different parameters (charge ${charge.id})`,
        },
      });
    }
    this.events.emit('charge:accepted', { charge, replayed });
    const hold = replayed ? undefined : this.holds.get(key);
    if (hold) {
      this.events.emit('response:held', { idempotencyKey: key, chargeId: charge.id });
      hold.reached({ chargeId: charge.id });
      await hold.released;
      this.events.emit('response:released', { idempotencyKey: key, chargeId: charge.id });
    }
    const response: ChargeResponse = {
      id: charge.id,
      object: 'charge',
      amount: charge.amountMinor,
      currency: charge.currency,
      customer: charge.customer,
      status: 'succeeded',
      created: charge.createdAt,
      idempotentReplayed: replayed,
    };
    send(res, 200, response, { 'idempotent-replayed': String(replayed) });
  }

  private async getCharge(id: string, res: ServerResponse): Promise<void> {
    const [row] = rowsOf<ChargeRow>(
      await this.database.db.execute(sql`
        SELECT id, idempotency_key, amount_minor::text AS amount_minor, currency, customer, description, request_count,
               created_at::text AS created_at
          FROM ${sql.raw(this.table)} WHERE id = ${id}`),
    );
    if (!row) return send(res, 404, { error: { type: 'not_found', message: `no charge ${id}` } });
    send(res, 200, toCharge(row));
  }
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/** What a caller sends to create a charge. */
export interface CreateChargeRequest {
  readonly idempotencyKey: string;
  readonly amountMinor: number;
  readonly currency: string;
  readonly customer: string;
  readonly description?: string;
}

/**
 * Create a charge at the provider at `baseUrl` (`POST /v1/charges`). Safe to repeat with the same key.
 * @throws ApplicationFailure: non-retryable for a 4xx answer (the request itself is wrong), retryable otherwise.
 */
export async function createCharge(baseUrl: string, request: CreateChargeRequest): Promise<ChargeResponse> {
  let response: Response;
  try {
    response = await fetch(new URL('/v1/charges', baseUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': request.idempotencyKey },
      body: JSON.stringify({
        amount: request.amountMinor,
        currency: request.currency,
        customer: request.customer,
        ...(request.description === undefined ? {} : { description: request.description }),
      }),
    });
  } catch (error) {
    throw ApplicationFailure.retryable(
      `payment provider unreachable: ${error instanceof Error ? error.message : String(error)}`,
      'ProviderUnavailable',
    );
  }
  const text = await response.text();
  if (!response.ok) {
    const message = `payment provider answered ${response.status} for key ${request.idempotencyKey}: ${text}`;
    throw response.status >= 400 &&
      response.status < 500 &&
      response.status !== 409 &&
      response.status !== 429
      ? ApplicationFailure.nonRetryable(message, 'ChargeRefused')
      : ApplicationFailure.retryable(message, 'ProviderError');
  }
  return JSON.parse(text) as ChargeResponse;
}
