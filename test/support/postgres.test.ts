import postgres from '@palisade/engine/postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { adminUrl, createTestDatabase, type TestDatabase } from './postgres.js';

describe('test database support', () => {
  const created: TestDatabase[] = [];
  const clients: postgres.Sql[] = [];
  const connect = (url: string) => {
    const sql = postgres(url, { max: 1, onnotice: () => undefined });
    clients.push(sql);
    return sql;
  };

  afterAll(async () => {
    await Promise.all(clients.map((sql) => sql.end({ timeout: 5 })));
    await Promise.all(created.map((db) => db.drop()));
  });

  it('runs PostgreSQL 15 or newer', async () => {
    const [row] = await connect(adminUrl())<{ server_version_num: string }[]>`show server_version_num`;
    expect(Number(row?.server_version_num)).toBeGreaterThanOrEqual(150000);
  });

  it('creates distinct, usable, UTF8 databases', async () => {
    const a = await createTestDatabase('smoke a');
    const b = await createTestDatabase('smoke a');
    created.push(a, b);
    expect(a.name).not.toBe(b.name);
    expect(a.url).not.toBe(b.url);

    const sqlA = connect(a.url);
    const sqlB = connect(b.url);
    const [rowA] = await sqlA<{ one: number; db: string; enc: string }[]>`
      select 1 as one, current_database() as db, pg_encoding_to_char(encoding) as enc
      from pg_database where datname = current_database()`;
    const [rowB] = await sqlB<{ one: number; db: string }[]>`select 1 as one, current_database() as db`;
    expect(rowA).toEqual({ one: 1, db: a.name, enc: 'UTF8' });
    expect(rowB).toEqual({ one: 1, db: b.name });

    // Isolation: a table created in one database is not visible in the other.
    await sqlA`create table marker (id int)`;
    const [visible] = await sqlB<{ exists: boolean }[]>`select to_regclass('marker') is not null as exists`;
    expect(visible?.exists).toBe(false);
  });

  it('drops a database even while connections to it are open', async () => {
    const db = await createTestDatabase('smoke drop');
    const sql = connect(db.url);
    await sql`select 1`;
    await db.drop();
    const [row] = await connect(adminUrl())<{ n: number }[]>`
      select count(*)::int as n from pg_database where datname = ${db.name}`;
    expect(row?.n).toBe(0);
    await db.drop(); // idempotent
  });
});
