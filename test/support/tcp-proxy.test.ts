import postgres from '@palisade/engine/postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { useTestDatabase } from './postgres.js';
import { createTcpProxy, unprepared, type TcpProxy } from './tcp-proxy.js';

/** Resolves to 'pending' if `promise` has not settled within `ms`. */
async function settledWithin<T>(promise: Promise<T>, ms: number): Promise<'pending' | { value: T }> {
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    promise.then((value) => ({ value })),
    new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), ms))),
  ]);
  clearTimeout(timer);
  return result;
}

describe('tcp proxy (against the test PostgreSQL server)', () => {
  const databaseUrl = useTestDatabase();
  const proxies: TcpProxy[] = [];
  const clients: postgres.Sql[] = [];

  afterEach(async () => {
    for (const p of proxies) p.restore();
    await Promise.all(clients.splice(0).map((c) => c.end({ timeout: 1 })));
    await Promise.all(proxies.splice(0).map((p) => p.close()));
  });

  async function proxy(): Promise<TcpProxy> {
    const target = new URL(databaseUrl());
    const p = await createTcpProxy(target.hostname, Number(target.port || 5432));
    proxies.push(p);
    return p;
  }

  function client(url: string): postgres.Sql {
    const sql = postgres(url, { max: 1, onnotice: () => undefined, connect_timeout: 10 });
    clients.push(sql);
    return sql;
  }

  it('forwards queries, and its url() keeps user, password, database and parameters', async () => {
    const p = await proxy();
    const original = new URL(databaseUrl());
    original.searchParams.set('application_name', 'via-proxy');
    const rewritten = new URL(p.url(original.toString()));
    expect([rewritten.hostname, rewritten.port]).toEqual(['127.0.0.1', String(p.port)]);
    expect([rewritten.username, rewritten.password, rewritten.pathname, rewritten.search]).toEqual([
      original.username,
      original.password,
      original.pathname,
      original.search,
    ]);
    const [viaProxy] = await client(rewritten.toString())<{ db: string; app: string }[]>`
      select current_database() as db, current_setting('application_name') as app`;
    const [direct] = await client(databaseUrl())<{ db: string }[]>`select current_database() as db`;
    expect(viaProxy).toEqual({ db: direct?.db, app: 'via-proxy' });
    expect(p.connectionCount()).toBe(1);
  });

  it('holds traffic both ways while blackholed, keeps the socket open, and delivers it in order on restore', async () => {
    const p = await proxy();
    const sql = client(p.url(databaseUrl()));
    const admin = client(databaseUrl());
    const [before] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;

    p.blackhole();
    const query = sql<{ pid: number; n: number }[]>`select pg_backend_pid() as pid, 42 as n`.execute();
    expect(await settledWithin(query, 500)).toBe('pending');
    // The server never saw the query: its backend is still idle, waiting on the same open socket.
    const [backend] = await admin<{ state: string }[]>`
      select state from pg_stat_activity where pid = ${before?.pid ?? -1}`;
    expect(backend?.state).toBe('idle');
    expect(p.connectionCount()).toBe(1);

    p.restore();
    const [after] = await query;
    expect(after).toEqual({ pid: before?.pid, n: 42 });
  });

  it('accepts a connection during a blackhole but lets nothing through until restore', async () => {
    const p = await proxy();
    p.blackhole();
    const sql = client(p.url(databaseUrl()));
    const query = sql<{ n: number }[]>`select 7 as n`.execute();
    expect(await settledWithin(query, 500)).toBe('pending');
    expect(p.connectionCount()).toBe(1);
    p.restore();
    expect(await query).toEqual([{ n: 7 }]);
  });

  it('adds the configured latency to each direction of a round trip, and delay(0) removes it', async () => {
    const p = await proxy();
    const sql = client(p.url(databaseUrl()));
    await sql`select 1`; // connect first: the handshake takes several round trips
    const roundTripMs = async (): Promise<number> => {
      const started = performance.now();
      await sql`select 1`;
      return performance.now() - started;
    };
    p.delay(300);
    const delayedMs = await roundTripMs();
    p.delay(0);
    const directMs = Math.min(await roundTripMs(), await roundTripMs());
    expect(delayedMs).toBeGreaterThanOrEqual(2 * 300 - 10); // once to the server, once back
    expect(directMs).toBeLessThan(delayedMs - 300); // absolute times vary with load; the added latency is gone
  });

  it('reset destroys current connections; the client sees a connection error, then reconnects', async () => {
    const p = await proxy();
    const sql = client(p.url(databaseUrl()));
    const [first] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const sleeping = sql`select pg_sleep(5)`.execute(); // postgres.js sends a query only once it is used
    await new Promise((resolve) => setTimeout(resolve, 100));
    p.reset();
    await expect(sleeping).rejects.toMatchObject({
      code: expect.stringMatching(/^(CONNECTION_CLOSED|ECONNRESET|CONNECTION_DESTROYED)$/) as unknown,
    });
    const [second] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    expect(second?.pid).not.toBe(first?.pid);
  });

  it('dropReplyAfter: the marked statement commits but the client never hears of it', async () => {
    const p = await proxy();
    const admin = client(databaseUrl());
    await admin`create table ledger_probe (id int primary key)`;
    const sql = client(p.url(databaseUrl()));
    await sql`select 1`;
    const rule = p.dropReplyAfter('-- drop-this-reply');
    const insert = sql.unsafe('insert into ledger_probe values (1) -- drop-this-reply').execute();
    expect(await rule.tripped).toBeGreaterThan(0);
    expect(await settledWithin(insert, 700)).toBe('pending');
    const [row] = await admin<{ n: number }[]>`select count(*)::int as n from ledger_probe`;
    expect(row?.n).toBe(1);

    // Other connections are unaffected; the dead one is ended with reset().
    const other = client(p.url(databaseUrl()));
    expect(await other`select 2 as n`).toEqual([{ n: 2 }]);
    expect(rule.trippedCount()).toBe(1);
    p.reset();
    await expect(insert).rejects.toBeDefined();
  });

  it('dropReplyAfter on a transaction COMMIT: committed, outcome unknown to the client', async () => {
    const p = await proxy();
    const admin = client(databaseUrl());
    await admin`create table txn_probe (id int primary key)`;
    const sql = client(p.url(databaseUrl()));
    await sql`select 1`;
    // postgres.js ends a transaction with a lowercase `commit`; the marker is matched byte for byte.
    const rule = p.dropReplyAfter('commit');
    const transaction = sql.begin(async (tx) => {
      await tx`insert into txn_probe values (1)`;
    });
    await rule.tripped;
    expect(await settledWithin(transaction, 700)).toBe('pending');
    const [row] = await admin<{ n: number }[]>`select count(*)::int as n from txn_probe`;
    expect(row?.n).toBe(1);
    p.reset();
    await expect(transaction).rejects.toBeDefined();
  });

  it('dropReplyAfter fromNextRequest: an unprepared statement with parameters runs after its describe round', async () => {
    const p = await proxy();
    const admin = client(databaseUrl());
    await admin`create table described_probe (id int primary key)`;
    const sql = client(unprepared(p.url(databaseUrl())));
    await sql`select 1`;
    // The SQL text travels alone first (Parse, Describe, Flush); Bind and Execute follow once that reply is in.
    const rule = p.dropReplyAfter('-- described', { fromNextRequest: true });
    const insert = sql.unsafe('insert into described_probe values ($1) -- described', [7]).execute();
    await rule.tripped;
    expect(await settledWithin(insert, 700)).toBe('pending');
    const [row] = await admin<{ n: number }[]>`select count(*)::int as n from described_probe where id = 7`;
    expect(row?.n).toBe(1);
    p.reset();
    await expect(insert).rejects.toBeDefined();
  });

  it('dropReplyAfter thenMarker: a transaction runs on, and only its COMMIT loses its reply', async () => {
    const p = await proxy();
    const admin = client(databaseUrl());
    await admin`create table then_probe (id int primary key)`;
    const sql = client(unprepared(p.url(databaseUrl())));
    const rule = p.dropReplyAfter('-- then-probe', { thenMarker: '\0commit\0' });
    let afterMarker = false;
    const transaction = sql.begin(async (tx) => {
      await tx.unsafe('insert into then_probe values ($1) -- then-probe', [8]);
      await tx.unsafe('insert into then_probe values ($1)', [9]);
      afterMarker = true;
    });
    await rule.tripped;
    expect(afterMarker).toBe(true);
    expect(await settledWithin(transaction, 700)).toBe('pending');
    const [row] = await admin<{ n: number }[]>`select count(*)::int as n from then_probe where id in (8, 9)`;
    expect(row?.n).toBe(2);
    p.reset();
    await expect(transaction).rejects.toBeDefined();
  });

  it('close() stops listening and ends every connection', async () => {
    const p = await proxy();
    const sql = client(p.url(databaseUrl()));
    await sql`select 1`;
    await p.close();
    expect(p.connectionCount()).toBe(0);
    const fresh = client(p.url(databaseUrl()));
    await expect(fresh`select 1`).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});
