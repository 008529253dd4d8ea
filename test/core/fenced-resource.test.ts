/**
 * The fenced-resource helper (research I18; Kleppmann's fencing tokens): a resource records, per scope, the
 * highest token it accepted and refuses lower ones — with LeaseLostError, and without committing the refused
 * writer's own writes. Concurrent writers with different tokens leave the highest.
 */
import postgres from '@palisade/engine/postgres';
import type { PGlite, Transaction as PgliteTransaction } from '@electric-sql/pglite';
import { describe, expect, it } from 'vitest';
import { LeaseLostError } from '@palisade/sdk';
import { createFencedResource, type FencedResource } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { rejectionOf } from '../support/rejections.js';
import { shuffled } from '../support/shuffled.js';
import { testPglite } from '../support/pglite.js';

const WRITERS = 24;

/**
 * Scopes that a literal quoted wrongly would break or turn into SQL (the fence sends its statements without
 * parameters): each is accepted, read back exactly, kept apart from its neighbours, and refused below its token.
 */
const AWKWARD_SCOPES = ["it's", 'back\\slash\\', "\\'; DROP TABLE fences; --", "E'x'", 'naïve 🦊'];

async function expectScopesKeptExactly(resource: FencedResource<unknown>): Promise<void> {
  for (const [i, scope] of AWKWARD_SCOPES.entries()) {
    await resource.accept({ scope, token: BigInt(10 + i) });
  }
  for (const [i, scope] of AWKWARD_SCOPES.entries()) {
    expect(await resource.highest(scope)).toBe(BigInt(10 + i));
    await expect(resource.accept({ scope, token: BigInt(9 + i) })).rejects.toMatchObject({
      code: 'LEASE_LOST',
      stepLabel: scope,
      currentToken: BigInt(10 + i),
    });
  }
}

describe('fenced resources on postgres', () => {
  const target = useEngineTarget('postgres');

  /** A resource on the engine's own `fences` table, and a document table beside it that writers update. */
  async function setup(sql: postgres.Sql): Promise<{ resource: FencedResource; schema: string }> {
    const engine = await target.engine();
    const schema = engine.schema;
    await sql.unsafe(`
      CREATE TABLE "${schema}".documents (id text PRIMARY KEY, body text NOT NULL, token bigint NOT NULL);
      CREATE TABLE "${schema}".ledger (id bigserial PRIMARY KEY, scope text NOT NULL, token bigint NOT NULL)`);
    return { resource: createFencedResource({ sql, schema }), schema };
  }

  /** Write `body` to document `id` under `token`, and append the token to the ledger, in one fenced write. */
  function writeDocument(resource: FencedResource, schema: string, id: string, token: bigint, body: string) {
    return resource.write({ scope: `doc:${id}`, token }, async (tx) => {
      await tx.unsafe(
        `INSERT INTO "${schema}".documents (id, body, token) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, token = EXCLUDED.token`,
        [id, body, token.toString()],
      );
      await tx.unsafe(`INSERT INTO "${schema}".ledger (scope, token) VALUES ($1, $2)`, [
        `doc:${id}`,
        token.toString(),
      ]);
      return body;
    });
  }

  async function document(sql: postgres.Sql, schema: string, id: string) {
    const [row] = await sql.unsafe<{ body: string; token: string }[]>(
      `SELECT body, token::text FROM "${schema}".documents WHERE id = $1`,
      [id],
    );
    return row;
  }

  it('accepts a higher token and an equal one, and refuses a lower one without committing its write', async () => {
    const sql = target.sql();
    const { resource, schema } = await setup(sql);

    await expect(writeDocument(resource, schema, 'a', 10n, 'first at 10')).resolves.toBe('first at 10');
    await expect(writeDocument(resource, schema, 'a', 10n, 'again at 10')).resolves.toBe('again at 10');
    await expect(writeDocument(resource, schema, 'a', 12n, 'at 12')).resolves.toBe('at 12');
    const error = await rejectionOf(writeDocument(resource, schema, 'a', 11n, 'stale at 11'));

    expect(error).toBeInstanceOf(LeaseLostError);
    const e = error as LeaseLostError;
    expect([e.code, e.operation, e.staleToken, e.currentToken, e.reason]).toEqual([
      'LEASE_LOST',
      'fenced-resource',
      11n,
      12n,
      'superseded',
    ]);
    expect(await document(sql, schema, 'a')).toEqual({ body: 'at 12', token: '12' });
    const ledger = await sql.unsafe<{ token: string }[]>(
      `SELECT token::text FROM "${schema}".ledger ORDER BY id`,
    );
    expect(ledger.map((r) => r.token)).toEqual(['10', '10', '12']);
    expect(await resource.highest('doc:a')).toBe(12n);
    // Scopes are independent; accept() checks and records without a write of its own.
    await resource.accept({ scope: 'doc:b', token: 1n });
    expect(await resource.highest('doc:b')).toBe(1n);
    await expect(resource.accept({ scope: 'doc:b', token: 0n })).rejects.toMatchObject({
      code: 'LEASE_LOST',
      staleToken: 0n,
      currentToken: 1n,
    });
    expect(await resource.highest('doc:c')).toBeNull();
  });

  it('keeps scopes with quotes, backslashes and SQL in them exactly', async () => {
    const { resource } = await setup(target.sql());
    await expectScopesKeptExactly(resource);
  });

  it(`leaves the highest token’s write when ${WRITERS} writers with different tokens race`, async () => {
    const admin = target.sql();
    // One connection per writer, so they really wait on each other in the database.
    const sql = postgres(target.url(), {
      max: WRITERS,
      onnotice: () => undefined,
      connection: { application_name: 'fence-writer' },
    });
    try {
      const { resource, schema } = await setup(sql);
      for (let round = 0; round < 5; round++) {
        const id = `race-${round}`;
        const tokens = shuffled(Array.from({ length: WRITERS }, (_, i) => BigInt(100 * round + i + 1)));
        // Hold the scope's fence row so every writer queues on it, then let them all go at once.
        await resource.accept({ scope: `doc:${id}`, token: 0n });
        // Settled as soon as they start: once the holder's COMMIT frees the row, a refused writer can reject before
        // the holder's own reply has come back, and an unwatched rejection is an error of the whole test run.
        let writes: Promise<PromiseSettledResult<string>[]> = Promise.resolve([]);
        let settled = 0;
        await admin.begin(async (tx) => {
          await tx.unsafe(`SELECT 1 FROM "${schema}".fences WHERE scope = $1 FOR UPDATE`, [`doc:${id}`]);
          writes = Promise.allSettled(
            tokens.map((t) =>
              writeDocument(resource, schema, id, t, `written at ${t}`).finally(() => settled++),
            ),
          );
          for (;;) {
            const [row] = await admin<{ waiting: number }[]>`
              SELECT count(*)::int AS waiting FROM pg_stat_activity
               WHERE datname = current_database() AND application_name = 'fence-writer'
                 AND wait_event_type = 'Lock'`;
            if ((row?.waiting ?? 0) >= WRITERS) break;
            if (settled > 0) throw new Error('a writer finished while the fence row was held');
          }
        });
        const outcomes = await writes;

        const highest = tokens.reduce((a, b) => (b > a ? b : a));
        expect(await resource.highest(`doc:${id}`)).toBe(highest);
        expect(await document(sql, schema, id)).toEqual({
          body: `written at ${highest}`,
          token: String(highest),
        });
        // Accepted writes committed in non-decreasing token order; every refused one left no row.
        const ledger = await sql.unsafe<{ token: string }[]>(
          `SELECT token::text FROM "${schema}".ledger WHERE scope = $1 ORDER BY id`,
          [`doc:${id}`],
        );
        const accepted = ledger.map((r) => BigInt(r.token));
        expect(accepted.every((t, i) => i === 0 || t >= (accepted[i - 1] as bigint))).toBe(true);
        const fulfilled = tokens.filter((_, i) => outcomes[i]?.status === 'fulfilled');
        expect([...fulfilled].sort(compare)).toEqual([...accepted].sort(compare));
        for (const [i, o] of outcomes.entries()) {
          if (o.status === 'fulfilled') continue;
          const e = o.reason as LeaseLostError;
          expect([e.code, e.staleToken]).toEqual(['LEASE_LOST', tokens[i]]);
          expect(e.currentToken).toBeGreaterThan(tokens[i] as bigint);
        }
      }
    } finally {
      await sql.end({ timeout: 5 });
    }
  });
});

function compare(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

describe('fenced resources on PGlite', () => {
  /** Hand `check` a resource (schema `store`), installed, on a fresh in-memory PGlite; close the PGlite after. */
  async function onFreshPglite(
    check: (resource: FencedResource<PgliteTransaction>, pglite: PGlite) => Promise<void>,
  ): Promise<void> {
    const pglite = testPglite();
    try {
      const resource = createFencedResource({ pglite, schema: 'store' });
      await resource.install();
      await check(resource, pglite);
    } finally {
      await pglite.close();
    }
  }

  it('accepts higher and equal tokens and refuses a lower one without committing its write', async () => {
    await onFreshPglite(async (resource, pglite) => {
      await pglite.exec(`CREATE TABLE store.documents (id text PRIMARY KEY, body text NOT NULL)`);
      const write = (token: bigint, body: string) =>
        resource.write({ scope: 'doc:a', token }, async (tx) => {
          await tx.query(
            `INSERT INTO store.documents (id, body) VALUES ('a', $1)
             ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`,
            [body],
          );
          return body;
        });
      await expect(write(10n, 'at 10')).resolves.toBe('at 10');
      await expect(write(10n, 'again at 10')).resolves.toBe('again at 10');
      await expect(write(12n, 'at 12')).resolves.toBe('at 12');
      const error = await rejectionOf(write(11n, 'stale at 11'));
      expect(error).toBeInstanceOf(LeaseLostError);
      expect(error).toMatchObject({ staleToken: 11n, currentToken: 12n, operation: 'fenced-resource' });
      expect((await pglite.query<{ body: string }>(`SELECT body FROM store.documents`)).rows).toEqual([
        { body: 'at 12' },
      ]);
      await expect(resource.accept({ scope: 'doc:a', token: 9n })).rejects.toBeInstanceOf(LeaseLostError);
      expect(await resource.highest('doc:a')).toBe(12n);
      expect(await resource.highest('doc:none')).toBeNull();
    });
  });

  it('keeps scopes with quotes, backslashes and SQL in them exactly', async () => {
    await onFreshPglite((resource) => expectScopesKeptExactly(resource));
  });

  it('refuses options with neither or both drivers, naming them', () => {
    expect(() => createFencedResource({} as never)).toThrow(
      /exactly one of `sql` \(postgres.js\) and `pglite`/,
    );
  });
});
