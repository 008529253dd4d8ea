/**
 * A card processor for the demo, running as a real HTTP server on loopback with its own tables. It behaves like
 * the real ones on the point that matters here — idempotency keys: the first request with a key creates a
 * charge (or a refund); any later request with the same key (a retry, or another worker's attempt at the same
 * work) gets the same object back, marked `Idempotent-Replayed: true`, and creates nothing; the same key with
 * different parameters is refused with 422. Every charge it accepts is a row of `<schema>.charges`, every refund
 * a row of `<schema>.refunds`; a refund names a charge and may not exceed what is left of it.
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

/** A refund as the provider stores and returns it: part or all of a charge, given back. */
export interface Refund {
  readonly id: string;
  readonly idempotencyKey: string;
  readonly chargeId: string;
  readonly amountMinor: number;
  readonly currency: string;
  readonly reason: string | null;
  /** How many requests presented its idempotency key (1 = never replayed). */
  readonly requestCount: number;
  readonly createdAt: string;
}

/** What `POST /v1/refunds` answers. */
export interface RefundResponse {
  readonly id: string;
  readonly object: 'refund';
  readonly charge: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: 'succeeded';
  readonly created: string;
  /** True when an earlier request with the same idempotency key created this refund. */
  readonly idempotentReplayed: boolean;
}

export interface PaymentProviderEvents {
  'charge:accepted': [{ charge: Charge; replayed: boolean }];
  'refund:accepted': [{ refund: Refund; replayed: boolean }];
  /** `chargeId`: the id of the charge, or of the refund, whose answer is held. */
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

const refundRequest = z
  .object({
    charge: z.string().regex(/^ch_[A-Za-z0-9]+$/, 'must be a charge id (ch_…)'),
    amount: z.number().int().positive(),
    reason: z.string().max(500).optional(),
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

interface RefundRow {
  id: string;
  idempotency_key: string;
  charge_id: string;
  amount_minor: string | number;
  currency: string;
  reason: string | null;
  request_count: number;
  created_at: string;
  replayed?: boolean;
}

function toRefund(row: RefundRow): Refund {
  return {
    id: row.id,
    idempotencyKey: row.idempotency_key,
    chargeId: row.charge_id,
    amountMinor: Number(row.amount_minor),
    currency: row.currency.trim(),
    reason: row.reason,
    requestCount: row.request_count,
    createdAt: row.created_at,
  };
}

/** A new object id with the provider's prefix (`ch_`, `re_`). */
function objectId(prefix: 'ch' | 're'): string {
  return `${prefix}_${randomBytes(12).toString('base64url').replace(/[-_]/g, 'x')}`;
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
  private readonly refundTable: string;

  private constructor(
    private readonly database: AppDatabase,
    private readonly server: Server,
    readonly url: string,
    schema: string,
  ) {
    this.table = `${quoteIdent(schema)}.charges`;
    this.refundTable = `${quoteIdent(schema)}.refunds`;
  }

  /** Create the provider's tables in `schema` (if absent) and listen on 127.0.0.1 (a free port). */
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
      `CREATE TABLE IF NOT EXISTS ${s}.refunds (
        id text PRIMARY KEY,
        idempotency_key text NOT NULL UNIQUE,
        charge_id text NOT NULL REFERENCES ${s}.charges (id),
        amount_minor bigint NOT NULL CHECK (amount_minor > 0),
        currency char(3) NOT NULL,
        reason text,
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
   * Hold the response to the first request that presents `idempotencyKey`: the charge (or refund) is created and
   * committed as usual, then the answer waits until `release()` — a slow card network, seen from the caller.
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

  /** Every refund the provider accepted, oldest first. */
  async refunds(): Promise<Refund[]> {
    const rows = rowsOf<RefundRow>(
      await this.database.db.execute(
        sql.raw(`SELECT id, idempotency_key, charge_id, amount_minor::text AS amount_minor, currency, reason,
                        request_count, created_at::text AS created_at
                   FROM ${this.refundTable} ORDER BY created_at, id`),
      ),
    );
    return rows.map(toRefund);
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
      if (req.method === 'POST' && req.url === '/v1/refunds') return await this.createRefund(req, res);
      const byId = /^\/v1\/charges\/(ch_[A-Za-z0-9]+)$/.exec(req.url ?? '');
      if (req.method === 'GET' && byId) return await this.getCharge(byId[1] as string, res);
      send(res, 404, { error: { type: 'not_found', message: `no route ${req.method} ${req.url}` } });
    } catch (error) {
      send(res, 500, {
        error: { type: 'api_error', message: error instanceof Error ? error.message : String(error) },
      });
    }
  }

  /** The idempotency key and the body of a POST, checked; or undefined once a 400 has been sent. */
  private async readRequest<S extends z.ZodType>(
    req: IncomingMessage,
    res: ServerResponse,
    schema: S,
  ): Promise<{ key: string; body: z.output<S> } | undefined> {
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || !KEY.test(key)) {
      send(res, 400, {
        error: {
          type: 'invalid_request',
          message: 'an Idempotency-Key header (1–255 visible ASCII characters) is required',
        },
      });
      return undefined;
    }
    let body: unknown;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      send(res, 400, { error: { type: 'invalid_request', message: 'the body must be JSON' } });
      return undefined;
    }
    const parsed = schema.safeParse(body);
    if (!parsed.success) {
      send(res, 400, {
        error: {
          type: 'invalid_request',
          message: parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '),
        },
      });
      return undefined;
    }
    return { key, body: parsed.data };
  }

  /** Hold the answer to the first request with `key`, if a hold was asked for (see holdFirstResponse). */
  private async holdIfAsked(key: string, id: string, replayed: boolean): Promise<void> {
    const hold = replayed ? undefined : this.holds.get(key);
    if (!hold) return;
    this.events.emit('response:held', { idempotencyKey: key, chargeId: id });
    hold.reached({ chargeId: id });
    await hold.released;
    this.events.emit('response:released', { idempotencyKey: key, chargeId: id });
  }

  private async createCharge(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const request = await this.readRequest(req, res, chargeRequest);
    if (!request) return;
    const { key, body: p } = request;
    const id = objectId('ch');
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
    await this.holdIfAsked(key, charge.id, replayed);
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

  private async createRefund(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const request = await this.readRequest(req, res, refundRequest);
    if (!request) return;
    const { key, body: p } = request;
    const refunds = sql.raw(this.refundTable);
    // One transaction: the charge's row lock orders the refunds of one charge, so that two of them cannot both
    // pass the check of what is left; a request with a key already used counts one more request and is answered
    // with the refund it created (or refused, with other parameters).
    const outcome = await this.database.db.transaction(async (tx) => {
      const [charge] = rowsOf<{ amount_minor: string; currency: string }>(
        await tx.execute(sql`SELECT amount_minor::text AS amount_minor, currency
                               FROM ${sql.raw(this.table)} WHERE id = ${p.charge} FOR UPDATE`),
      );
      if (!charge) return { kind: 'refused', status: 404, message: `no charge ${p.charge}` } as const;
      const [row] = rowsOf<RefundRow>(
        await tx.execute(sql`
          UPDATE ${refunds} SET request_count = request_count + 1, last_request_at = clock_timestamp()
           WHERE idempotency_key = ${key}
          RETURNING id, idempotency_key, charge_id, amount_minor::text AS amount_minor, currency, reason, request_count,
                    created_at::text AS created_at, true AS replayed`),
      );
      if (row) return { kind: 'refund', refund: toRefund(row), replayed: true } as const;
      const [refunded] = rowsOf<{ total: string }>(
        await tx.execute(sql`SELECT coalesce(sum(amount_minor), 0)::text AS total FROM ${refunds}
                              WHERE charge_id = ${p.charge}`),
      );
      const left = Number(charge.amount_minor) - Number(refunded?.total ?? 0);
      if (p.amount > left) {
        return {
          kind: 'refused',
          status: 422,
          message: `refund of ${p.amount} exceeds what is left of charge ${p.charge} (${left})`,
        } as const;
      }
      const [created] = rowsOf<RefundRow>(
        await tx.execute(sql`
          INSERT INTO ${refunds} (id, idempotency_key, charge_id, amount_minor, currency, reason)
          VALUES (${objectId('re')}, ${key}, ${p.charge}, ${p.amount}, ${charge.currency}, ${p.reason ?? null})
          RETURNING id, idempotency_key, charge_id, amount_minor::text AS amount_minor, currency, reason, request_count,
                    created_at::text AS created_at, false AS replayed`),
      );
      if (!created) throw new Error('refund insert returned no row');
      return { kind: 'refund', refund: toRefund(created), replayed: false } as const;
    });
    if (outcome.kind === 'refused') {
      return send(res, outcome.status, {
        error: { type: outcome.status === 404 ? 'not_found' : 'refund_error', message: outcome.message },
      });
    }
    const { refund, replayed } = outcome;
    if (replayed && (refund.chargeId !== p.charge || refund.amountMinor !== p.amount)) {
      return send(res, 422, {
        error: {
          type: 'idempotency_error',
          message: `Idempotency-Key ${key} was first used with different parameters (refund ${refund.id})`,
        },
      });
    }
    this.events.emit('refund:accepted', { refund, replayed });
    await this.holdIfAsked(key, refund.id, replayed);
    const response: RefundResponse = {
      id: refund.id,
      object: 'refund',
      charge: refund.chargeId,
      amount: refund.amountMinor,
      currency: refund.currency,
      status: 'succeeded',
      created: refund.createdAt,
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
  return postIdempotent<ChargeResponse>(baseUrl, '/v1/charges', request.idempotencyKey, 'ChargeRefused', {
    amount: request.amountMinor,
    currency: request.currency,
    customer: request.customer,
    ...(request.description === undefined ? {} : { description: request.description }),
  });
}

/** What a caller sends to refund (part of) a charge. */
export interface CreateRefundRequest {
  readonly idempotencyKey: string;
  readonly chargeId: string;
  readonly amountMinor: number;
  readonly reason?: string;
}

/**
 * Refund `amountMinor` of a charge at the provider at `baseUrl` (`POST /v1/refunds`). Safe to repeat with the same
 * key: the provider answers with the refund the first request created.
 * @throws ApplicationFailure: non-retryable for a 4xx answer (no such charge, more than is left of it, a key reused
 * with other parameters), retryable otherwise.
 */
export async function createRefund(baseUrl: string, request: CreateRefundRequest): Promise<RefundResponse> {
  return postIdempotent<RefundResponse>(baseUrl, '/v1/refunds', request.idempotencyKey, 'RefundRefused', {
    charge: request.chargeId,
    amount: request.amountMinor,
    ...(request.reason === undefined ? {} : { reason: request.reason }),
  });
}

/** POST `body` to `path` with an idempotency key; a 4xx other than 409/429 is final, anything else may be retried. */
async function postIdempotent<T>(
  baseUrl: string,
  path: string,
  idempotencyKey: string,
  refusedType: string,
  body: Record<string, unknown>,
): Promise<T> {
  let response: Response;
  try {
    response = await fetch(new URL(path, baseUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
      body: JSON.stringify(body),
    });
  } catch (error) {
    throw ApplicationFailure.retryable(
      `payment provider unreachable: ${error instanceof Error ? error.message : String(error)}`,
      'ProviderUnavailable',
    );
  }
  const text = await response.text();
  if (!response.ok) {
    const message = `payment provider answered ${response.status} for key ${idempotencyKey}: ${text}`;
    throw response.status >= 400 &&
      response.status < 500 &&
      response.status !== 409 &&
      response.status !== 429
      ? ApplicationFailure.nonRetryable(message, refusedType)
      : ApplicationFailure.retryable(message, 'ProviderError');
  }
  return JSON.parse(text) as T;
}
