/**
 * Transactional start: `client.start` / `startMany` / `enqueue` / `enqueueMany` with `{ tx }` write the run in the
 * caller's transaction (drizzle on postgres-js or PGlite, postgres.js `sql.begin`), so it exists if and only if that
 * transaction commits, and workers are woken by the NOTIFY PostgreSQL delivers at its COMMIT, never before.
 * Delayed starts (`startAt`, `delay`) are due by the database clock and wake nobody until then; a workflow's
 * priority orders its turn claims.
 */
import { sql } from 'drizzle-orm';
import { pgSchema, text } from 'drizzle-orm/pg-core';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePostgres } from 'drizzle-orm/postgres-js';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isPalisadeError } from '@palisade/sdk';
import { createEngine, type Engine, type Worker } from '@palisade/engine';
import postgres from '@palisade/engine/postgres';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget, type EngineTarget } from '../support/engine.js';
import { createTestDatabase } from '../support/postgres.js';
import { attemptsOf, dbNowMs, deferred, runOf, stepsOf } from './workflow-rows.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, workerFor } from '../support/worker.js';
import { pureActivity } from '../fixtures/pure-activity.js';
import { oneStepWorkflow } from '../fixtures/one-step-workflow.js';
import { testPglite } from '../support/pglite.js';

const pack = pureActivity(
  'pack',
  z.object({ orderId: z.string() }),
  z.string(),
  ({ orderId }) => `packed ${orderId}`,
);

const fulfil = oneStepWorkflow('fulfil', pack);

/** The application's own table, in the engine's schema of the test. */
function ordersTable(engine: Engine) {
  return pgSchema(engine.names.schema).table('orders', { id: text('id').primaryKey() });
}

async function createOrders(engine: Engine): Promise<void> {
  await engine.database.rows(
    sql`CREATE TABLE ${sql.identifier(engine.names.schema)}.orders (id text PRIMARY KEY)`,
  );
}

async function count(engine: Engine, table: 'runs' | 'events' | 'orders'): Promise<number> {
  const from = table === 'orders' ? sql`${sql.identifier(engine.names.schema)}.orders` : engine.names[table];
  const rows = await engine.database.rows<{ n: number }>(sql`SELECT count(*)::int AS n FROM ${from}`);
  return Number(rows[0]?.n);
}

/** How long after its creation a run's first turn is due (ms, database clock), as stored. */
async function firstTurnDelayMs(engine: Engine, runId: string): Promise<number> {
  const rows = await engine.database.rows<{ ms: number }>(sql`
    SELECT (extract(epoch FROM turn_next_run_at - created_at) * 1000)::float8 AS ms
      FROM ${engine.names.runs} WHERE id = ${runId}::uuid`);
  return Number(rows[0]?.ms);
}

/**
 * Every NOTIFY on the engine's channel from now on, in delivery order, and `marker()`: sends a NOTIFY of its own
 * from another session and resolves once it has arrived — every notification committed before it has arrived too
 * (PostgreSQL delivers them in commit order), so "nothing else arrived" can be asserted without a sleep.
 */
async function listenTo(
  target: EngineTarget,
  engine: Engine,
): Promise<{ payloads: string[]; marker(): Promise<void> }> {
  const channel = engine.names.channel;
  const payloads: string[] = [];
  const waiters: (() => void)[] = [];
  const onPayload = (payload: string) => {
    payloads.push(payload);
    if (payload === 'marker') waiters.shift()?.();
  };
  let send: () => Promise<unknown>;
  if (target.driver === 'postgres') {
    const admin = target.sql();
    await admin.listen(channel, onPayload);
    send = () => admin.notify(channel, 'marker');
  } else {
    const pglite = target.pglite();
    await pglite.listen(channel, onPayload);
    send = () => pglite.query('SELECT pg_notify($1, $2)', [channel, 'marker']);
  }
  return {
    payloads,
    async marker() {
      const arrived = new Promise<void>((resolve) => waiters.push(resolve));
      await send();
      await arrived;
    },
  };
}

/** A drizzle instance over the caller's own connection to the test database (postgres-js or PGlite). */
function callerDrizzle(target: EngineTarget) {
  return target.driver === 'postgres' ? drizzlePostgres(target.sql()) : drizzlePglite(target.pglite());
}

class Rollback extends Error {}

function startedWorker(engine: Engine, options: { concurrency?: number } = {}): Promise<Worker> {
  return startWorker(engine, [fulfil, pack], { pollIntervalMs: 50, ...options });
}

/** A fresh engine with the orders table, and a started worker of `fulfil`. */
async function ordersEngine(target: EngineTarget): Promise<{ engine: Engine; worker: Worker }> {
  const engine = await target.engine();
  await createOrders(engine);
  return { engine, worker: await startedWorker(engine) };
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`transactional start with a drizzle transaction on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('commits the run with the caller’s write, and a worker runs it after the commit', async () => {
      const { engine, worker } = await ordersEngine(target);
      const orders = ordersTable(engine);
      const db = callerDrizzle(target);
      // The worker has a turn slot free, so a start outside a transaction would be granted its first turn by the
      // statement that creates the run (an eager start); inside the caller's transaction it must not be.
      const grants: string[] = [];
      const firstTurn = new Promise<void>((resolve) => {
        worker.events.on('turn:committed', (e) => {
          grants.push(e.grant);
          resolve();
        });
      });
      const inside: { status: string; turn_token: string | null; attempts: number }[] = [];
      const handle = await db.transaction(async (tx) => {
        await tx.insert(orders).values({ id: 'o-1' });
        const started = await engine.client.start(fulfil, { orderId: 'o-1' }, { tx, key: 'order-o-1' });
        // Read in the caller's transaction, where an eager grant's writes would be visible: none.
        const result = await tx.execute<{ status: string; turn_token: string | null; attempts: number }>(sql`
          SELECT r.status, r.turn_token::text,
                 (SELECT count(*)::int FROM ${engine.names.attempts} a WHERE a.run_id = r.id) AS attempts
            FROM ${engine.names.runs} r WHERE r.id = ${started.runId}::uuid`);
        inside.push(...(Array.isArray(result) ? result : (result as { rows: typeof inside }).rows));
        return started;
      });
      expect(handle.created).toBe(true);
      expect(inside).toEqual([{ status: 'pending', turn_token: null, attempts: 0 }]);
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('packed o-1');
      expect(await count(engine, 'orders')).toBe(1);
      // Its first turn was claimed by the worker after the commit, not granted by the start's statement.
      await firstTurn;
      expect(grants[0]).toBe('claimed');
      expect(
        (await attemptsOf(engine, handle.runId)).filter((a) => a.kind === 'turn').length,
      ).toBeGreaterThan(0);
      await worker.stop();
    });

    it('leaves no run, no event and no wake-up when the transaction rolls back, and the key free', async () => {
      const { engine, worker } = await ordersEngine(target);
      const committed: string[] = [];
      worker.events.on('turn:committed', (e) => committed.push(e.runId));
      const notes = await listenTo(target, engine);
      const orders = ordersTable(engine);
      const db = callerDrizzle(target);
      let runId = '';
      await expect(
        db.transaction(async (tx) => {
          await tx.insert(orders).values({ id: 'o-2' });
          runId = (await engine.client.start(fulfil, { orderId: 'o-2' }, { tx, key: 'order-o-2' })).runId;
          throw new Rollback('the order was refused');
        }),
      ).rejects.toBeInstanceOf(Rollback);
      expect(runId).not.toBe('');
      await notes.marker();
      expect(notes.payloads).toEqual(['marker']);
      expect(await count(engine, 'runs')).toBe(0);
      expect(await count(engine, 'events')).toBe(0);
      expect(await count(engine, 'orders')).toBe(0);
      // The key is free: a start with it creates a new run (another id), which the worker runs.
      const again = await engine.client.start(fulfil, { orderId: 'o-3' }, { key: 'order-o-2' });
      expect(again.created).toBe(true);
      expect(again.runId).not.toBe(runId);
      await expect(again.result({ timeoutMs: 15_000 })).resolves.toBe('packed o-3');
      expect(new Set(committed)).toEqual(new Set([again.runId]));
      await worker.stop();
    });

    it('starts and enqueues many in the transaction; a refused key undoes only its own statement', async () => {
      const { engine, worker } = await ordersEngine(target);
      const orders = ordersTable(engine);
      const db = callerDrizzle(target);
      const { runs, jobs } = await db.transaction(async (tx) => {
        await tx.insert(orders).values({ id: 'batch' });
        const runs = await engine.client.startMany(fulfil, [{ orderId: 'a' }, { orderId: 'b' }], {
          tx,
          keys: ['k-a', 'k-b'],
        });
        // Same key, another input: RUN_KEY_CONFLICT; the caller goes on with its transaction.
        const refused = await engine.client
          .startMany(fulfil, [{ orderId: 'c' }, { orderId: 'd' }], { tx, keys: ['k-c', 'k-c'] })
          .catch((error: unknown) => error);
        expect(isPalisadeError(refused, 'RUN_KEY_CONFLICT')).toBe(true);
        const jobs = await engine.client.enqueueMany(pack, [{ orderId: 'e' }, { orderId: 'f' }], {
          tx,
          keys: ['j-e', 'j-f'],
        });
        await tx.insert(orders).values({ id: 'after-the-refusal' });
        return { runs, jobs };
      });
      await expect(Promise.all(runs.map((h) => h.result({ timeoutMs: 15_000 })))).resolves.toEqual([
        'packed a',
        'packed b',
      ]);
      await expect(Promise.all(jobs.map((h) => h.result({ timeoutMs: 15_000 })))).resolves.toEqual([
        'packed e',
        'packed f',
      ]);
      // 2 workflow runs + 2 jobs; nothing of the refused statement (its runs were rolled back to the savepoint).
      const keys = await engine.database.rows<{ idempotency_key: string }>(
        sql`SELECT idempotency_key FROM ${engine.names.runs} WHERE parent_run_id IS NULL ORDER BY 1`,
      );
      expect(keys.map((k) => k.idempotency_key)).toEqual(['j-e', 'j-f', 'k-a', 'k-b']);
      expect(await count(engine, 'orders')).toBe(2);
      await worker.stop();
    });

    it('enqueues a job with the caller’s write', async () => {
      const { engine, worker } = await ordersEngine(target);
      const db = callerDrizzle(target);
      const job = await db.transaction(async (tx) => {
        await tx.insert(ordersTable(engine)).values({ id: 'j-1' });
        return engine.client.enqueue(pack, { orderId: 'j-1' }, { tx });
      });
      await expect(job.result({ timeoutMs: 15_000 })).resolves.toBe('packed j-1');
      await worker.stop();
    });

    it('refuses a drizzle database, a client and values that are not transactions, naming tx', async () => {
      const engine = await target.engine();
      const db = callerDrizzle(target);
      const client = target.driver === 'postgres' ? target.sql() : target.pglite();
      for (const tx of [db, client, {}, 42, 'tx', null]) {
        const error = await engine.client
          .start(fulfil, { orderId: 'x' }, { tx: tx as never })
          .catch((e: unknown) => e);
        expect(isPalisadeError(error, 'INVALID_OPTIONS'), String(error)).toBe(true);
        expect((error as { issues: { path: string }[] }).issues.map((i) => i.path)).toEqual(['tx']);
      }
      const bulk = await engine.client
        .enqueueMany(pack, [{ orderId: 'x' }], { tx: db as never })
        .catch((e: unknown) => e);
      expect((bulk as { issues?: { path: string }[] }).issues?.map((i) => i.path)).toEqual(['tx']);
      expect(await count(engine, 'runs')).toBe(0);
    });
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`a transaction of another database on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });
    let other: { url: string; drop(): Promise<void> } | undefined;
    afterEach(async () => {
      await other?.drop();
      other = undefined;
    });

    it('is refused naming tx, even with the engine’s schema there, and writes nothing on either', async () => {
      const engine = await target.engine();
      // Another database with the engine's schema migrated: the statements would succeed there.
      let otherEngine: Engine;
      let begin: <T>(fn: (tx: unknown) => Promise<T>) => Promise<T>;
      let closeOther: () => Promise<void>;
      if (driver === 'postgres') {
        other = await createTestDatabase('tx_other');
        otherEngine = await createEngine({ databaseUrl: other.url, schema: engine.schema });
        const client = postgres(other.url, { max: 1, onnotice: () => undefined });
        begin = (fn) => client.begin((tx) => fn(tx)) as never;
        closeOther = () => client.end({ timeout: 1 });
      } else {
        const pglite = testPglite();
        otherEngine = await createEngine({ pglite, schema: engine.schema });
        begin = (fn) => pglite.transaction((tx) => fn(tx));
        closeOther = () => pglite.close();
      }
      try {
        const error = await begin((tx) =>
          engine.client.start(fulfil, { orderId: 'elsewhere' }, { tx: tx as never, key: 'elsewhere' }),
        ).catch((e: unknown) => e);
        expect(isPalisadeError(error, 'INVALID_OPTIONS'), String(error)).toBe(true);
        expect((error as { issues: { path: string }[] }).issues.map((i) => i.path)).toEqual(['tx']);
        expect((error as Error).message).toMatch(
          /tx: is a (postgres\.js|PGlite) transaction on database "[^"]+"( of another (server|PGlite instance))?, not on this engine's database "[^"]+": the run would be committed where no worker of this engine sees it/,
        );
        const bulk = await begin((tx) =>
          engine.client.enqueueMany(pack, [{ orderId: 'elsewhere' }], { tx: tx as never }),
        ).catch((e: unknown) => e);
        expect(isPalisadeError(bulk, 'INVALID_OPTIONS'), String(bulk)).toBe(true);
        expect(await count(otherEngine, 'runs')).toBe(0);
        expect(await count(engine, 'runs')).toBe(0);
      } finally {
        await otherEngine.close();
        await closeOther();
      }
    });
  });
}

describe('transactional start with a postgres.js transaction (sql.begin)', () => {
  const target = useEngineTarget('postgres');

  it('commits the run with the caller’s write, never waking a worker before the commit', async () => {
    const { engine, worker } = await ordersEngine(target);
    const notes = await listenTo(target, engine);
    const caller = target.sql();
    const started = deferred<string>();
    const commit = deferred();
    const committing = caller.begin(async (tx) => {
      await tx.unsafe(`INSERT INTO "${engine.names.schema}".orders (id) VALUES ($1)`, ['o-9']);
      const handle = await engine.client.start(fulfil, { orderId: 'o-9' }, { tx });
      started.resolve(handle.runId);
      await commit.promise;
      return handle;
    });
    const runId = await started.promise;
    // The transaction is open: the run is invisible from outside, and no NOTIFY has been delivered.
    expect(await count(engine, 'runs')).toBe(0);
    await expect(engine.client.getHandle(runId).describe()).rejects.toMatchObject({ code: 'RUN_NOT_FOUND' });
    await notes.marker();
    expect(notes.payloads).toEqual(['marker']);
    commit.resolve();
    const handle = await committing;
    await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('packed o-9');
    await notes.marker();
    // The wake-up arrived after the first marker: at the commit.
    expect(notes.payloads.filter((p) => p.startsWith('turn:'))).toEqual(['turn:default']);
    expect(notes.payloads.indexOf('turn:default')).toBeGreaterThan(0);
    // The caller's client keeps its own parsers: a timestamp still comes back as a Date (drizzle would have
    // turned them into strings on that client).
    const [row] = await caller`SELECT now() AS t`;
    expect(row?.t).toBeInstanceOf(Date);
    await worker.stop();
  });

  it('rolls the run back with the transaction, and stores inputs as the engine’s own client does', async () => {
    const engine = await target.engine();
    const worker = await startedWorker(engine);
    const notes = await listenTo(target, engine);
    const caller = target.sql();
    await expect(
      caller.begin(async (tx) => {
        await engine.client.start(fulfil, { orderId: 'gone' }, { tx, key: 'k' });
        throw new Rollback('no');
      }),
    ).rejects.toBeInstanceOf(Rollback);
    await notes.marker();
    expect(notes.payloads).toEqual(['marker']);
    expect(await count(engine, 'runs')).toBe(0);
    const handle = await caller.begin((tx) =>
      engine.client.start(fulfil, { orderId: 'kept' }, { tx, key: 'k' }),
    );
    await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('packed kept');
    // The input is a jsonb object, not a JSON string (the caller's serializer was not used on it).
    const [stored] = await engine.database.rows<{ type: string }>(
      sql`SELECT jsonb_typeof(input) AS type FROM ${engine.names.runs} WHERE id = ${handle.runId}::uuid`,
    );
    expect(stored?.type).toBe('object');
    await worker.stop();
  });

  it('surfaces a failed statement as an error that says the transaction is aborted, without retrying', async () => {
    const engine = await target.engine({ migrate: false });
    const caller = target.sql();
    const error = await caller
      .begin((tx) => engine.client.start(fulfil, { orderId: 'x' }, { tx }))
      .catch((e: unknown) => e);
    expect(isPalisadeError(error, 'DATABASE_ERROR')).toBe(true);
    expect((error as Error).message).toContain(`no engine schema "${engine.names.schema}"`);
    expect((error as Error).message).toContain('roll it back');
  });

  it('refuses a transaction kept past its end, committed or rolled back, and writes nothing', async () => {
    const engine = await target.engine();
    const caller = target.sql();
    let committed: unknown;
    await caller.begin((tx) => {
      committed = tx;
      return Promise.resolve();
    });
    let rolledBack: unknown;
    await caller
      .begin((tx) => {
        rolledBack = tx;
        return Promise.reject(new Rollback());
      })
      .catch((e: unknown) => {
        if (!(e instanceof Rollback)) throw e;
      });
    let fromDrizzle: unknown;
    await drizzlePostgres(caller).transaction((tx) => {
      fromDrizzle = tx;
      return Promise.resolve();
    });
    for (const tx of [committed, rolledBack, fromDrizzle]) {
      const error = await engine.client
        .start(fulfil, { orderId: 'late' }, { tx: tx as never })
        .catch((e: unknown) => e);
      expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
      expect((error as Error).message).toMatch(/tx: is a (postgres.js|drizzle) transaction.* that has ended/);
    }
    expect(await count(engine, 'runs')).toBe(0);
  });

  it('refuses the client itself and a PGlite transaction, naming tx', async () => {
    const engine = await target.engine();
    const pglite = testPglite();
    try {
      await pglite.transaction(async (tx) => {
        const error = await engine.client.start(fulfil, { orderId: 'x' }, { tx }).catch((e: unknown) => e);
        expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
        expect((error as Error).message).toMatch(
          /tx: is a PGlite transaction, but this engine runs on PostgreSQL/,
        );
      });
    } finally {
      await pglite.close();
    }
    const error = await engine.client
      .start(fulfil, { orderId: 'x' }, { tx: target.sql() as never })
      .catch((e: unknown) => e);
    expect((error as Error).message).toMatch(/tx: is a postgres.js client, not a transaction/);
  });
});

describe('transactional start on an embedded (PGlite) engine', () => {
  const target = useEngineTarget('pglite');
  const server = useEngineTarget('postgres', { warm: true });

  it('refuses a postgres.js transaction, naming tx', async () => {
    const engine = await target.engine();
    await server.sql().begin(async (tx) => {
      const error = await engine.client.enqueue(pack, { orderId: 'x' }, { tx }).catch((e: unknown) => e);
      expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
      expect((error as Error).message).toMatch(
        /tx: is a postgres.js transaction, but this engine runs on PGlite/,
      );
    });
  });

  it('takes a PGlite transaction of its own database', async () => {
    const engine = await target.engine();
    const worker = await startedWorker(engine);
    const handle = await target
      .pglite()
      .transaction((tx) => engine.client.start(fulfil, { orderId: 'p-1' }, { tx }));
    await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('packed p-1');
    await worker.stop();
  });
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`delayed starts and priority on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });
    const TEN_MINUTES_MS = 600_000;

    it('creates a delayed run pending, wakes nobody, and has it claimed only once due by the database clock', async () => {
      const engine = await target.engine();
      const worker = await startedWorker(engine);
      const notes = await listenTo(target, engine);
      const startAt = new Date((await dbNowMs(engine)) + TEN_MINUTES_MS);
      const later = await engine.client.start(fulfil, { orderId: 'later' }, { startAt });
      const run = await runOf(engine, later.runId);
      expect(run.status).toBe('pending');
      expect(run.turn_next_run_at_ms).toBe(startAt.getTime());
      expect((await later.describe()).run.startAt).toEqual(startAt);
      await notes.marker();
      expect(notes.payloads).toEqual(['marker']);

      // Half way: a run started now completes, the delayed one has not been claimed.
      await advanceClock(engine, TEN_MINUTES_MS / 2);
      const now = await engine.client.start(fulfil, { orderId: 'now' });
      await expect(now.result({ timeoutMs: 15_000 })).resolves.toBe('packed now');
      expect((await runOf(engine, later.runId)).status).toBe('pending');
      expect(await attemptsOf(engine, later.runId)).toEqual([]);

      await advanceClock(engine, TEN_MINUTES_MS / 2 + 1_000);
      await expect(later.result({ timeoutMs: 15_000 })).resolves.toBe('packed later');
      const [firstTurn] = await attemptsOf(engine, later.runId);
      expect(firstTurn?.claimed_at_ms).toBeGreaterThanOrEqual(startAt.getTime());
      expect((await later.describe()).run.startAt).toBeNull();
      await worker.stop();
    });

    it('takes a delay as a duration, a start time in the past as now, and refuses both at once', async () => {
      const engine = await target.engine();
      const delayed = await engine.client.start(fulfil, { orderId: 'd' }, { delayMs: '10m' });
      expect(await firstTurnDelayMs(engine, delayed.runId)).toBe(TEN_MINUTES_MS);
      const [many] = await engine.client.startMany(fulfil, [{ orderId: 'm' }], { delayMs: 60_000 });
      expect((await many?.describe())?.run.startAt).not.toBeNull();

      const past = await engine.client.start(fulfil, { orderId: 'p' }, { startAt: new Date(0) });
      expect((await past.describe()).run.startAt).toBeNull();
      expect(await firstTurnDelayMs(engine, past.runId)).toBe(0);

      const both = await engine.client
        .start(fulfil, { orderId: 'x' }, { delayMs: '1m', startAt: new Date() })
        .catch((e: unknown) => e);
      expect(isPalisadeError(both, 'INVALID_OPTIONS')).toBe(true);
      expect((both as { issues: { path: string }[] }).issues.map((i) => i.path)).toEqual(['startAt']);
      const jobBoth = await engine.client
        .enqueue(pack, { orderId: 'x' }, { delayMs: 10, startAt: new Date() })
        .catch((e: unknown) => e);
      expect((jobBoth as { issues?: { path: string }[] }).issues?.map((i) => i.path)).toEqual(['startAt']);
      const notADate = await engine.client
        .start(fulfil, { orderId: 'x' }, { startAt: '2030-01-01' as unknown as Date })
        .catch((e: unknown) => e);
      expect((notADate as { issues?: { path: string }[] }).issues?.map((i) => i.path)).toEqual(['startAt']);
      expect(await count(engine, 'runs')).toBe(3);
    });

    it('refuses a startAt at the ends of JavaScript’s range at the door, naming startAt, on every start call', async () => {
      const engine = await target.engine();
      for (const startAt of [new Date(8.64e15), new Date(-8.64e15), new Date('0000-12-31T00:00:00Z')]) {
        const refusals = await Promise.all([
          engine.client.start(fulfil, { orderId: 'x' }, { startAt }).catch((e: unknown) => e),
          engine.client.startMany(fulfil, [{ orderId: 'x' }], { startAt }).catch((e: unknown) => e),
          engine.client.enqueue(pack, { orderId: 'x' }, { startAt }).catch((e: unknown) => e),
          engine.client.enqueueMany(pack, [{ orderId: 'x' }], { startAt }).catch((e: unknown) => e),
        ]);
        for (const refused of refusals) {
          expect(isPalisadeError(refused, 'INVALID_OPTIONS'), String(refused)).toBe(true);
          expect((refused as Error).message).toContain(
            'startAt: must be a time between the years 0001 and 9999',
          );
        }
      }
      const latest = await engine.client.start(
        fulfil,
        { orderId: 'y' },
        { startAt: new Date('9999-12-31T23:59:59.999Z') },
      );
      expect((await latest.describe()).run.startAt).toEqual(new Date('9999-12-31T23:59:59.999Z'));
      expect(await count(engine, 'runs')).toBe(1);
    });

    it('enqueues a job that starts at a given time', async () => {
      const engine = await target.engine();
      const worker = await startedWorker(engine);
      const startAt = new Date((await dbNowMs(engine)) + TEN_MINUTES_MS);
      const job = await engine.client.enqueue(pack, { orderId: 'job' }, { startAt });
      const [step] = await stepsOf(engine, job.runId);
      expect(step?.next_run_at_ms).toBe(startAt.getTime());
      expect((await job.describe()).run.startAt).toEqual(startAt);
      await advanceClock(engine, TEN_MINUTES_MS + 1_000);
      await expect(job.result({ timeoutMs: 15_000 })).resolves.toBe('packed job');
      await worker.stop();
    });

    it('claims a higher-priority workflow turn before a lower-priority one queued earlier, and its steps inherit it', async () => {
      const engine = await target.engine();
      const low = await engine.client.start(fulfil, { orderId: 'low' }, { priority: -5 });
      const high = await engine.client.start(fulfil, { orderId: 'high' }, { priority: 7 });
      const worker = workerFor(engine, [fulfil, pack], {
        pollIntervalMs: 50,
        concurrency: 1,
        // One turn at a time: with more slots one claim takes both turns, and their commits race.
        workflowConcurrency: 1,
      });
      const firstTurns: string[] = [];
      worker.events.on('turn:committed', (e) => {
        if (!firstTurns.includes(e.runId)) firstTurns.push(e.runId);
      });
      await worker.start();
      await checkOnEvents([worker], () => firstTurns.length === 2, 'both runs’ first turns');
      expect(firstTurns).toEqual([high.runId, low.runId]);
      await Promise.all([high.result({ timeoutMs: 15_000 }), low.result({ timeoutMs: 15_000 })]);
      const priorities = await engine.database.rows<{ run_id: string; priority: number }>(
        sql`SELECT run_id::text, priority FROM ${engine.names.steps} WHERE run_id IN (${low.runId}::uuid, ${high.runId}::uuid)`,
      );
      expect(Object.fromEntries(priorities.map((p) => [p.run_id, p.priority]))).toEqual({
        [low.runId]: -5,
        [high.runId]: 7,
      });
      await worker.stop();
    });
  });
}
