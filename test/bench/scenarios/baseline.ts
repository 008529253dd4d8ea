/**
 * 0. What this server does without Palisade: single-row UPDATE transactions per second (autocommit, each
 * client on its own row so they never wait on each other's locks), from one client and from `poolSize`
 * clients. DESIGN.md §9 states its targets as ratios on the same PostgreSQL; this is the yardstick.
 *
 * Also the same UPDATE with a `pg_notify` in the statement, from `poolSize` clients: PostgreSQL serializes
 * the commits of transactions that NOTIFY (a cluster-wide lock taken before commit and held through the WAL
 * flush), so this is the ceiling of any engine statement that notifies, on this server, right now.
 */
import postgres from '@palisade/engine/postgres';
import { perSecond, summarize } from '../stats.js';
import type { ScenarioContext } from './context.js';

export interface BaselineResult {
  readonly durationMs: number;
  readonly oneClientTxPerSec: number;
  readonly clients: number;
  readonly manyClientsTxPerSec: number;
  /** The same UPDATE with `pg_notify` in the statement, `clients` clients. */
  readonly manyClientsNotifyTxPerSec: number;
  /** p50 of `select 1`, one at a time: the price of one round trip to this server. */
  readonly roundTripP50Ms: number;
}

const ROUND_TRIP_SAMPLES = 500;

export async function plainUpdateBaseline(ctx: ScenarioContext): Promise<BaselineResult> {
  const { config, server } = ctx;
  const schema = server.newSchema('base');
  const clients = config.poolSize;
  const sql = postgres(server.url, { max: clients, onnotice: () => undefined });
  try {
    await sql.unsafe(`create schema "${schema}";
      create table "${schema}".counters (id int primary key, n bigint not null default 0);
      insert into "${schema}".counters (id) select generate_series(0, ${clients - 1});`);
    const table = sql(`${schema}.counters`);
    const update = (id: number, notify: boolean) =>
      notify
        ? sql`with u as (update ${table} set n = n + 1 where id = ${id} returning id)
              select pg_notify(${`bench_${schema}`}, 'tick') from u`
        : sql`update ${table} set n = n + 1 where id = ${id}`;
    const measure = async (
      parallel: number,
      durationMs = config.baselineMs,
      notify = false,
    ): Promise<number> => {
      let count = 0;
      const until = performance.now() + durationMs;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: parallel }, async (_, id) => {
          while (performance.now() < until) {
            await update(id, notify);
            count++;
          }
        }),
      );
      return perSecond(count, performance.now() - started);
    };
    await measure(clients, 300); // warm-up: connections, prepared statements
    const one = await measure(1);
    const many = await measure(clients);
    const manyNotify = await measure(clients, config.baselineMs, true);
    const roundTrips: number[] = [];
    for (let i = 0; i < ROUND_TRIP_SAMPLES; i++) {
      const started = performance.now();
      await sql`select 1`;
      roundTrips.push(performance.now() - started);
    }
    return {
      durationMs: config.baselineMs,
      oneClientTxPerSec: one,
      clients,
      manyClientsTxPerSec: many,
      manyClientsNotifyTxPerSec: manyNotify,
      roundTripP50Ms: summarize(roundTrips).p50Ms,
    };
  } finally {
    await sql.end({ timeout: 5 });
    await server.dropSchema(schema);
  }
}
