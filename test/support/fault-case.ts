/**
 * Shared set-up and database readers for the fault-injection cases (test/cases/f*.test.ts): a migrated engine
 * schema with the fixture tables, a payment stub, TCP proxies, and plain SQL readers of the engine's tables, so
 * every expectation is checked against what the database recorded.
 */
import type postgres from '@palisade/engine/postgres';
import { afterEach } from 'vitest';
import type { Engine } from '@palisade/engine';
import { fixtureTablesDdl } from '../fixtures/activities.js';
import type { EngineTarget } from './engine.js';
import { createPaymentStub, type PaymentStub } from './payment-stub.js';
import { createTcpProxy, type TcpProxy } from './tcp-proxy.js';

export interface FaultCase {
  readonly engine: Engine;
  readonly schema: string;
  /** The file database's URL (direct, no proxy). */
  readonly databaseUrl: string;
  /** An admin client on the file database. */
  readonly sql: postgres.Sql;
  readonly db: CaseDatabase;
}

/** Per-test resources of the fault cases, released after each test. */
export function useFaultCase(target: EngineTarget): {
  /** A fresh engine schema (migrated by the parent engine) with the fixture tables. */
  setUp(): Promise<FaultCase>;
  paymentStub(): Promise<PaymentStub>;
  /** A TCP proxy in front of the test database. */
  proxy(): Promise<TcpProxy>;
} {
  const stubs: PaymentStub[] = [];
  const proxies: TcpProxy[] = [];
  afterEach(async () => {
    await Promise.all(proxies.splice(0).map((p) => p.close()));
    await Promise.all(stubs.splice(0).map((s) => s.close()));
  });
  return {
    async setUp() {
      const engine = await target.engine();
      const sql = target.sql();
      await sql.unsafe(fixtureTablesDdl(engine.schema));
      return {
        engine,
        schema: engine.schema,
        databaseUrl: target.url(),
        sql,
        db: caseDatabase(sql, engine.schema),
      };
    },
    async paymentStub() {
      const stub = await createPaymentStub();
      stubs.push(stub);
      return stub;
    },
    async proxy() {
      const url = new URL(target.url());
      const proxy = await createTcpProxy(url.hostname, Number(url.port || 5432));
      proxies.push(proxy);
      return proxy;
    },
  };
}

export interface StepRecord {
  id: string;
  status: string;
  attempt: number;
  epoch: number;
  token: string;
  worker_id: string | null;
  error: { type?: string; message?: string } | null;
  /** The whole row as PostgreSQL prints it, for byte-for-byte comparisons. */
  row_text: string;
}

/** One claim of a step (an `attempts` row); times are epoch ms by the database clock. */
export interface AttemptRecord {
  attempt: number;
  epoch: number;
  token: string;
  worker_id: string;
  outcome: string | null;
  claimed_at_ms: number;
  ended_at_ms: number | null;
}

export interface EventRecord {
  type: string;
  step_id: string | null;
  token: string | null;
  worker_id: string | null;
  data: Record<string, unknown> | null;
  at_ms: number;
}

export interface RunRecord {
  status: string;
  output: unknown;
  error: { type?: string; message?: string } | null;
}

export interface CaseDatabase {
  run(runId: string): Promise<RunRecord>;
  /** The run's only step (a standalone activity run, or a one-step workflow). */
  step(runId: string): Promise<StepRecord>;
  /** The attempts of the run's activity step (not its workflow turns), in token order. */
  attempts(runId: string): Promise<AttemptRecord[]>;
  events(runId: string): Promise<EventRecord[]>;
  /** The types of the run's events, in order (as {@link events} reads them). */
  eventTypes(runId: string): Promise<string[]>;
  ledger(runId: string): Promise<{ token: string; worker_id: string; amount_cents: number }[]>;
  executions(runId: string): Promise<{ token: string; worker_id: string }[]>;
  markers(runId: string): Promise<{ token: string; worker_id: string; kind: string }[]>;
}

/** Plain readers of the engine's and the fixtures' tables in `schema`. Times are epoch ms (DB clock). */
export function caseDatabase(sql: postgres.Sql, schema: string): CaseDatabase {
  const t = (name: string) => `"${schema}"."${name}"`;
  const ms = (column: string) => `(extract(epoch from ${column}) * 1000)::float8`;
  const db: CaseDatabase = {
    async run(runId) {
      const [row] = await sql.unsafe<RunRecord[]>(
        `SELECT status, output, error FROM ${t('runs')} WHERE id = $1`,
        [runId],
      );
      if (!row) throw new Error(`no run ${runId}`);
      return row;
    },
    async step(runId) {
      const rows = await sql.unsafe<StepRecord[]>(
        `SELECT id::text, status, attempt, epoch, fencing_token::text AS token, worker_id, error, s::text AS row_text
           FROM ${t('steps')} s WHERE run_id = $1`,
        [runId],
      );
      if (rows.length !== 1) throw new Error(`run ${runId} has ${rows.length} steps, expected 1`);
      return rows[0] as StepRecord;
    },
    attempts: (runId) =>
      sql.unsafe<AttemptRecord[]>(
        `SELECT attempt, epoch, fencing_token::text AS token, worker_id, outcome,
                ${ms('claimed_at')} AS claimed_at_ms, ${ms('ended_at')} AS ended_at_ms
           FROM ${t('attempts')} WHERE run_id = $1 AND kind = 'activity' ORDER BY fencing_token`,
        [runId],
      ),
    events: (runId) =>
      sql.unsafe<EventRecord[]>(
        `SELECT type, step_id::text, fencing_token::text AS token, worker_id, data, ${ms('at')} AS at_ms
           FROM ${t('run_events')} WHERE run_id = $1 ORDER BY at, rank, ord`,
        [runId],
      ),
    eventTypes: async (runId) => (await db.events(runId)).map((e) => e.type),
    ledger: (runId) =>
      sql.unsafe(
        `SELECT fencing_token::text AS token, worker_id, amount_cents FROM ${t('ledger')} WHERE run_id = $1 ORDER BY id`,
        [runId],
      ),
    executions: (runId) =>
      sql.unsafe(
        `SELECT fencing_token::text AS token, worker_id FROM ${t('executions')} WHERE run_id = $1 ORDER BY id`,
        [runId],
      ),
    markers: (runId) =>
      sql.unsafe(
        `SELECT fencing_token::text AS token, worker_id, kind FROM ${t('markers')} WHERE run_id = $1 ORDER BY id`,
        [runId],
      ),
  };
  return db;
}
