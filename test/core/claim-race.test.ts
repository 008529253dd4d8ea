/**
 * FAILURE-CASES F12 — one winner per claim. Many claimers on separate connections are released together by a
 * database barrier (they queue on an advisory lock the test holds, then all run the claim statement the moment
 * it is released), over many iterations, on one row. Also the claim racing the other writers of that row: a
 * failure with retry, the due time of a delayed step passing, and lease expiry (heartbeat and expiry
 * maintenance at the lease boundary).
 *
 * The claim statement is called directly (`claimSteps`), as a worker does: a Worker would add its own
 * scheduling between the barrier and the statement, which is not what is under test.
 *
 * Iterations: PALISADE_CLAIM_RACE_ITERATIONS (default 200) for the main race; PALISADE_CLAIM_RACE_SIDE_ITERATIONS
 * (default an eighth of that) for each of the others.
 * Claimers: PALISADE_CLAIM_RACE_CLAIMERS (default 64); the file needs that many connections, plus a few.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import postgres from '@palisade/engine/postgres';
import { afterAll, describe, expect, it, onTestFinished } from 'vitest';
import { LeaseLostError } from '@palisade/sdk';
import { createEngine, type Database, type Engine } from '@palisade/engine';
import { advanceClock, setClockOffset } from '@palisade/engine/testing';
import {
  claimSteps,
  completeStep,
  expireSteps,
  failStep,
  heartbeatSteps,
  type ClaimedStepRow,
} from '@palisade/engine/testing/internals';
import { useEngineTarget, type EngineTarget } from '../support/engine.js';
import { attemptRefOf, eventsOfType, stepOfRun } from './engine-rows.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { shuffled } from '../support/shuffled.js';

const CLAIMERS = Number(process.env.PALISADE_CLAIM_RACE_CLAIMERS ?? 64);
const ITERATIONS = Number(process.env.PALISADE_CLAIM_RACE_ITERATIONS ?? 200);
const SIDE_ITERATIONS = Number(
  process.env.PALISADE_CLAIM_RACE_SIDE_ITERATIONS ?? Math.max(8, Math.ceil(ITERATIONS / 8)),
);
const LEASE_MS = 30_000;
/** advisory-lock class of the barriers of this file (two-int form: never collides with the migrator's lock). */
const BARRIER_CLASS = 0x5041_4c;

const raced = emptyActivity('raced', {
  leaseMs: LEASE_MS,
  run() {
    return Promise.resolve({});
  },
});

/** A huge budget and no backoff: every claim of the test is eligible as soon as the lease or due time allows. */
const NO_BACKOFF = { maximumAttempts: 1_000_000, initialIntervalMs: 0, jitter: 0 };

type Outcome<T> = { ok: true; value: T } | { ok: false; error: unknown };

interface Racer {
  engine: Engine;
  /**
   * Run each contender on its own connection, all released at the same instant; at most CONTENDERS of them.
   * Contenders run as separate statements (autocommit), as a worker's statements do.
   */
  race: <T>(
    contenders: readonly ((db: Database) => Promise<T>)[],
    beforeRelease?: () => Promise<unknown>,
  ) => Promise<Outcome<T>[]>;
}

/** How long to wait for a shared server to have enough free connections for the contenders. */
const CONNECT_WAIT_MS = 60_000;

/** Connections in the race: the claimers and one writer racing them. */
const CONTENDERS = CLAIMERS + 1;

/**
 * A barrier in the database: the test holds an exclusive advisory lock on its own connection; each contender
 * asks for the shared lock first, with its statement pipelined right behind on the same connection, so the
 * statement starts on the server the moment the lock is granted — no client round trip in between. Once every
 * contender is queued (seen in pg_locks, not guessed with a sleep) the test releases the lock.
 */
/**
 * One single-connection client per contender, for the whole file (connecting 65 clients is the slow part):
 * a contender's statements run in order on its own connection. They carry no lock_timeout: waiting at the
 * barrier is not a conflict to cut short.
 */
function useContenderClients(target: EngineTarget): () => Promise<postgres.Sql[]> {
  let clients: Promise<postgres.Sql[]> | undefined;
  afterAll(async () => {
    const opened = await clients?.catch(() => []);
    await Promise.all((opened ?? []).map((c) => c.end({ timeout: 5 })));
  });
  return () =>
    (clients ??= (async () => {
      const opened = Array.from({ length: CONTENDERS }, () =>
        postgres(target.url(), {
          max: 1,
          fetch_types: false,
          onnotice: () => undefined,
          connection: { application_name: 'claim-racer' },
        }),
      );
      // Connect them all now. The server may be shared: while it has too few free connections (53300), wait
      // for them a bounded time, then fail with a message that says so.
      const started = performance.now();
      let missing = opened;
      for (;;) {
        const results = await Promise.allSettled(missing.map((c) => c`SELECT 1`));
        const failed = results.flatMap((r, i) => (r.status === 'rejected' ? [[missing[i], r.reason]] : []));
        if (failed.length === 0) return opened;
        const tooMany = failed.every(([, e]) => (e as { code?: string }).code === '53300');
        if (!tooMany || performance.now() - started > CONNECT_WAIT_MS) {
          await Promise.all(opened.map((c) => c.end({ timeout: 1 })));
          throw new Error(
            `claim race: could not open ${CONTENDERS} connections within ${CONNECT_WAIT_MS} ms ` +
              `(${failed.length} missing); lower PALISADE_CLAIM_RACE_CLAIMERS or free connections`,
            { cause: failed[0]?.[1] },
          );
        }
        missing = failed.map(([c]) => c as postgres.Sql);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    })());
}

async function racer(target: EngineTarget, contenderClients: () => Promise<postgres.Sql[]>): Promise<Racer> {
  // Its own statements are few and sequential; the contenders already take most of a server's connections.
  const engine = await target.engine({ poolSize: 2 });
  const holder = await target.sql().reserve();
  onTestFinished(() => holder.release());
  // An engine view of each contender's connection, on this test's schema (no connection of its own).
  const views = await Promise.all(
    (await contenderClients()).map((client) =>
      createEngine({ sql: client, schema: engine.schema, migrate: false }),
    ),
  );
  onTestFinished(() => Promise.all(views.map((v) => v.close())).then(() => undefined));
  const connections = views.map((v) => v.database);
  let round = 0;
  return {
    engine,
    race: async <T>(
      contenders: readonly ((db: Database) => Promise<T>)[],
      beforeRelease?: () => Promise<unknown>,
    ): Promise<Outcome<T>[]> => {
      if (contenders.length > connections.length) throw new Error('more contenders than connections');
      const key = ++round;
      const lock = sql`SELECT pg_advisory_lock_shared(${BARRIER_CLASS}::int, ${key}::int)`;
      const unlock = sql`SELECT pg_advisory_unlock_shared(${BARRIER_CLASS}::int, ${key}::int)`;
      await holder`SELECT pg_advisory_lock(${BARRIER_CLASS}::int, ${key}::int)`;
      let settled = 0;
      const run = async (contender: (db: Database) => Promise<T>, db: Database): Promise<Outcome<T>> => {
        const queued = db.rows(lock);
        const outcome = contender(db).then(
          (value): Outcome<T> => ({ ok: true, value }),
          (error: unknown): Outcome<T> => ({ ok: false, error }),
        );
        const released = db.rows(unlock);
        try {
          await queued;
          await released;
          return await outcome;
        } finally {
          settled++;
        }
      };
      // Queued in random order: the lock wakes its waiters in queue order, and no contender may always be first.
      const slots = shuffled(contenders.map((_, i) => i));
      const runs: Promise<Outcome<T>>[] = [];
      for (const i of slots) {
        runs[i] = run(
          contenders[i] as (db: Database) => Promise<T>,
          connections[slots[i] as number] as Database,
        );
      }
      const started = performance.now();
      for (;;) {
        const [row] = await holder<{ waiting: number }[]>`
          SELECT count(*)::int AS waiting FROM pg_locks
           WHERE locktype = 'advisory' AND classid = ${BARRIER_CLASS} AND objid = ${key} AND objsubid = 2
             AND NOT granted`;
        if ((row?.waiting ?? 0) >= contenders.length) break;
        if (settled > 0 || performance.now() - started > 20_000) {
          await holder`SELECT pg_advisory_unlock(${BARRIER_CLASS}::int, ${key}::int)`;
          await Promise.allSettled(runs);
          throw new Error(`barrier: only ${row?.waiting ?? 0} of ${contenders.length} contenders queued`);
        }
      }
      await beforeRelease?.();
      await holder`SELECT pg_advisory_unlock(${BARRIER_CLASS}::int, ${key}::int)`;
      return Promise.all(runs);
    },
  };
}

function claimer(engine: Engine, i: number): (db: Database) => Promise<ClaimedStepRow[]> {
  return (db) =>
    claimSteps(db, engine.names, {
      workerId: `claimer-${i}`,
      claimRequestId: randomUUID(),
      queues: ['default'],
      activityNames: ['raced'],
      limit: 1,
    });
}

function claimers(engine: Engine, count = CLAIMERS): ((db: Database) => Promise<ClaimedStepRow[]>)[] {
  return Array.from({ length: count }, (_, i) => claimer(engine, i));
}

/** The grants among claim outcomes; any claim that threw fails the test with its error. */
function grantsOf(outcomes: readonly Outcome<unknown>[]): ClaimedStepRow[] {
  return outcomes.flatMap((o) => {
    if (!o.ok) throw o.error;
    return Array.isArray(o.value) ? (o.value as ClaimedStepRow[]) : [];
  });
}

/** One uncontended claim. */
async function claimOnce(engine: Engine): Promise<ClaimedStepRow[]> {
  return claimer(engine, -1)(engine.database);
}

/**
 * Pairs of consecutive attempts of a step (by token) whose live leases could overlap: the earlier one has no
 * recorded end, or ended (for a reclaimed attempt: when its last lease expired) after the later one was claimed.
 */
async function overlappingAttempts(engine: Engine): Promise<unknown[]> {
  return engine.database.rows(sql`
    SELECT step_id::text, fencing_token::text FROM (
      SELECT step_id, fencing_token, ended_at,
             lead(claimed_at) OVER (PARTITION BY step_id ORDER BY fencing_token) AS next_claimed_at
        FROM ${engine.names.attempts}) a
     WHERE next_claimed_at IS NOT NULL AND (ended_at IS NULL OR ended_at > next_claimed_at)`);
}

/** Strictly increasing, as bigints. */
function strictlyIncreasing(tokens: readonly bigint[]): boolean {
  return tokens.every((t, i) => i === 0 || t > (tokens[i - 1] as bigint));
}

/**
 * Where the database clock stands when a race on a lease's expiry opens. `before`/`after`: 2 s before or after
 * the expiry, so the outcome is known. `crossing`: 1 s before it, and one more contender moves the clock 1 s
 * past it while the others run — which of them still sees the lease live depends only on the interleaving.
 */
type Boundary = 'before' | 'after' | 'crossing';

function boundaryOf(i: number, period: number): Boundary {
  return i % period === 0 ? 'before' : i % period === 1 ? 'after' : 'crossing';
}

function expiryRace(engine: Engine, stepId: string, boundary: Boundary) {
  const n = engine.names;
  const offsetMs = boundary === 'before' ? -2_000 : boundary === 'after' ? 2_000 : -1_000;
  return {
    /** Moves the clock to `offsetMs` from the step's lease expiry (run just before the barrier opens). */
    place: () =>
      engine.database.rows(sql`
        UPDATE ${n.clockOffset} o
           SET offset_ms = o.offset_ms + round(extract(epoch FROM (s.lease_expires_at - ${n.now})) * 1000 + ${offsetMs})
          FROM ${n.steps} s WHERE s.id = ${stepId}::uuid`),
    /** The contender that moves the clock past the expiry, for a `crossing` race; none otherwise. */
    ticks:
      boundary === 'crossing'
        ? [
            async (db: Database) => {
              // One statement, so it is already queued behind the barrier; visible the moment it commits, not
              // after a WAL flush: the others race the clock, not its fsync.
              await db.rows(sql`DO $$ BEGIN
                PERFORM set_config('synchronous_commit', 'off', true);
                UPDATE ${n.clockOffset} SET offset_ms = offset_ms + 2000;
              END $$`);
              return 'ticked';
            },
          ]
        : [],
  };
}

describe('claim races on postgres (F12)', { timeout: 180_000 }, () => {
  const target = useEngineTarget('postgres');
  const contenderClients = useContenderClients(target);

  it(`grants each expired lease to exactly one of ${CLAIMERS} simultaneous claimers, with strictly increasing tokens`, async ({
    annotate,
  }) => {
    const { engine, race } = await racer(target, contenderClients);
    await setClockOffset(engine, 0);
    const run = await engine.client.enqueue(raced, {}, { retry: NO_BACKOFF });
    const step = await stepOfRun(engine, run.runId);
    const grants: ClaimedStepRow[] = [];
    const winnersPerIteration: number[] = [];
    const started = performance.now();
    for (let i = 0; i < ITERATIONS; i++) {
      const won = grantsOf(await race(claimers(engine)));
      winnersPerIteration.push(won.length);
      grants.push(...won);
      // Re-arm: the winner's lease expires (it never heartbeats), so the next round races for a reclaim.
      await advanceClock(engine, LEASE_MS + 1);
    }
    await annotate(
      `${ITERATIONS} iterations × ${CLAIMERS} claimers in ${Math.round(performance.now() - started)} ms`,
    );

    expect(winnersPerIteration.filter((w) => w !== 1)).toEqual([]);
    expect(grants.every((g) => g.id === step.id)).toBe(true);
    const tokens = grants.map((g) => BigInt(g.token));
    expect(strictlyIncreasing(tokens)).toBe(true);
    expect(grants.map((g) => g.epoch)).toEqual(grants.map((_, i) => i + 1));
    expect(grants.map((g) => g.attempt)).toEqual(grants.map((_, i) => i + 1));
    expect(grants.map((g) => g.prev_token)).toEqual([null, ...grants.slice(0, -1).map((g) => g.token)]);

    // The database agrees: one attempts row per grant, in grant order, each earlier one ended as expired.
    const rows = await engine.database.rows<{ token: string; epoch: number; outcome: string | null }>(sql`
      SELECT fencing_token::text AS token, epoch, outcome FROM ${engine.names.attempts}
       WHERE step_id = ${step.id}::uuid ORDER BY fencing_token`);
    expect(rows.map((r) => r.token)).toEqual(grants.map((g) => g.token));
    expect(rows.map((r) => r.outcome)).toEqual([
      ...Array.from({ length: ITERATIONS - 1 }, () => 'lease_expired'),
      null,
    ]);
    expect(await overlappingAttempts(engine)).toEqual([]);
    // Nobody heartbeats here, so the lease each claim recorded is the whole live lease: it ends before the next.
    const overlappingLeases = await engine.database.rows(sql`
      SELECT fencing_token FROM (
        SELECT fencing_token, (data->>'leaseExpiresAt')::timestamptz AS lease_expires_at,
               lead(at) OVER (ORDER BY fencing_token) AS next_claimed_at
          FROM ${engine.names.runEvents} WHERE type = 'attempt:claimed') c
       WHERE lease_expires_at > next_claimed_at`);
    expect(overlappingLeases).toEqual([]);
    const claimedEvents = await eventsOfType(engine, 'attempt:claimed');
    expect(claimedEvents.map((e) => e.token)).toEqual(grants.map((g) => g.token));
    expect(claimedEvents.map((e) => e.data?.reclaimedFromToken ?? null)).toEqual(
      grants.map((g) => g.prev_token),
    );
    const final = await stepOfRun(engine, run.runId);
    expect([final.status, final.epoch, final.token]).toEqual(['running', ITERATIONS, grants.at(-1)?.token]);
  });

  it('never lets a claimer take a step before its owner’s failure with retry commits', async ({
    annotate,
  }) => {
    const { engine, race } = await racer(target, contenderClients);
    await engine.client.enqueue(raced, {}, { retry: NO_BACKOFF });
    let [owner] = await claimOnce(engine);
    let wonInRace = 0;
    const problems: string[] = [];
    for (let i = 0; i < SIDE_ITERATIONS && owner; i++) {
      const current: ClaimedStepRow = owner;
      const failure = (db: Database) =>
        failStep(db, engine.names, {
          ...attemptRefOf(current),
          error: { type: 'Error', message: `failure ${i}`, nonRetryable: false },
          retry: true,
        });
      const [failed, ...claims] = await race<unknown>([failure, ...claimers(engine)]);
      // The owner's lease was live: its fenced failure must apply whatever the claimers did.
      if (!failed?.ok || failed.value !== 'applied') problems.push(`iteration ${i}: failure not applied`);
      const won = grantsOf(claims);
      if (won.length > 1) problems.push(`iteration ${i}: ${won.length} winners`);
      wonInRace += won.length;
      const next = won[0] ?? (await claimOnce(engine))[0];
      if (!next || BigInt(next.token) <= BigInt(current.token) || next.epoch !== current.epoch + 1) {
        problems.push(`iteration ${i}: bad successor of token ${current.token}`);
      }
      owner = next;
    }
    await annotate(`${wonInRace} of ${SIDE_ITERATIONS} retries were claimed inside the race`);
    expect(problems).toEqual([]);

    const rows = await engine.database.rows<{ outcome: string | null; token: string }>(sql`
      SELECT outcome, fencing_token::text AS token FROM ${engine.names.attempts} ORDER BY fencing_token`);
    expect(rows.map((r) => r.outcome)).toEqual([
      ...Array.from({ length: SIDE_ITERATIONS }, () => 'failed'),
      null,
    ]);
    expect(strictlyIncreasing(rows.map((r) => BigInt(r.token)))).toBe(true);
    expect(await overlappingAttempts(engine)).toEqual([]);
    expect(await eventsOfType(engine, 'attempt:failed')).toHaveLength(SIDE_ITERATIONS);
    expect(await eventsOfType(engine, 'attempt:stale-rejected')).toEqual([]);
  });

  it('grants a delayed step exactly once, never before its due time by the database clock', async ({
    annotate,
  }) => {
    const { engine, race } = await racer(target, contenderClients);
    const n = engine.names;
    const delayMs = 60_000;
    await setClockOffset(engine, 0);
    await engine.database.rows(
      sql`CREATE TABLE ${sql.raw(`"${engine.schema}"."due_times"`)} (step_id uuid PRIMARY KEY, due_at timestamptz NOT NULL)`,
    );
    let wonInRace = 0;
    const problems: string[] = [];
    for (let i = 0; i < SIDE_ITERATIONS; i++) {
      const run = await engine.client.enqueue(raced, {}, { delayMs, retry: NO_BACKOFF });
      const [due] = await engine.database.rows<{ id: string }>(sql`
        INSERT INTO ${sql.raw(`"${engine.schema}"."due_times"`)} (step_id, due_at)
        SELECT id, next_run_at FROM ${n.steps} WHERE run_id = ${run.runId}::uuid RETURNING step_id::text AS id`);
      // The clock crosses the due time in the same instant as the claimers run.
      const tick = async (db: Database) => {
        await db.rows(sql`UPDATE ${n.clockOffset} SET offset_ms = offset_ms + ${delayMs}`);
        return [] as ClaimedStepRow[];
      };
      const [ticked, ...claims] = await race([tick, ...claimers(engine)]);
      if (!ticked?.ok) throw ticked?.error;
      const won = grantsOf(claims);
      if (won.length > 1) problems.push(`iteration ${i}: ${won.length} winners`);
      wonInRace += won.length;
      const grant = won[0] ?? (await claimOnce(engine))[0];
      if (grant?.id !== due?.id) problems.push(`iteration ${i}: the due step was not granted`);
      // Done with it: only the next delayed step is ever claimable.
      if (grant) await completeStep(engine.database, n, { ...attemptRefOf(grant), output: {} });
    }
    await annotate(`${wonInRace} of ${SIDE_ITERATIONS} due steps were claimed inside the race`);
    expect(problems).toEqual([]);
    const early = await engine.database.rows(sql`
      SELECT a.fencing_token::text FROM ${n.attempts} a
        JOIN ${sql.raw(`"${engine.schema}"."due_times"`)} d ON d.step_id = a.step_id
       WHERE a.claimed_at < d.due_at`);
    expect(early).toEqual([]);
    const perStep = await engine.database.rows<{ grants: number }>(sql`
      SELECT count(*)::int AS grants FROM ${n.attempts} GROUP BY step_id`);
    expect(perStep.map((r) => r.grants)).toEqual(Array.from({ length: SIDE_ITERATIONS }, () => 1));
  });

  it('lets either the owner’s heartbeat or one claimer win a lease at its expiry, never both', async ({
    annotate,
  }) => {
    const { engine, race } = await racer(target, contenderClients);
    const n = engine.names;
    await setClockOffset(engine, 0);
    await engine.client.enqueue(raced, {}, { retry: NO_BACKOFF });
    let [owner] = await claimOnce(engine);
    const tally = { renewed: 0, reclaimed: 0, neither: 0 };
    const problems: string[] = [];
    let rejections = 0;
    for (let i = 0; i < SIDE_ITERATIONS && owner; i++) {
      const current: ClaimedStepRow = owner;
      const boundary = boundaryOf(i, 4);
      const clock = expiryRace(engine, current.id, boundary);
      const heartbeat = (db: Database) =>
        heartbeatSteps(db, n, [{ stepId: current.id, token: BigInt(current.token), nonce: current.nonce }]);
      const [beat, ...rest] = await race<unknown>(
        [heartbeat, ...clock.ticks, ...claimers(engine, CLAIMERS - clock.ticks.length)],
        clock.place,
      );
      const claims = rest.slice(clock.ticks.length);
      if (!beat?.ok) throw beat?.error;
      const renewed = (beat.value as { renewed: boolean }[])[0]?.renewed === true;
      if (!renewed) rejections++;
      const won = grantsOf(claims);
      if (won.length > 1) problems.push(`iteration ${i}: ${won.length} winners`);
      if (renewed && won.length > 0) problems.push(`iteration ${i}: renewed and reclaimed`);
      if (boundary === 'before' && !(renewed && won.length === 0)) problems.push(`iteration ${i}: early`);
      if (boundary === 'after' && !(!renewed && won.length === 1)) problems.push(`iteration ${i}: late`);
      if (renewed) {
        tally.renewed++;
        continue;
      }
      if (won.length === 1) tally.reclaimed++;
      else tally.neither++;
      // Expired and not renewed: the next claim must succeed, under a higher token.
      owner = won[0] ?? (await claimOnce(engine))[0];
      if (!owner || BigInt(owner.token) <= BigInt(current.token))
        problems.push(`iteration ${i}: no successor`);
    }
    await annotate(
      `heartbeat won ${tally.renewed}, a claimer won ${tally.reclaimed}, neither (reclaimed after) ${tally.neither}`,
    );
    expect(problems).toEqual([]);
    expect(tally.renewed).toBeGreaterThan(0);
    expect(tally.reclaimed).toBeGreaterThan(0);
    expect(await eventsOfType(engine, 'attempt:stale-rejected')).toHaveLength(rejections);
    expect(await overlappingAttempts(engine)).toEqual([]);
  });

  it('lets either the owner or expiry maintenance end a step with no attempts left, never both', async ({
    annotate,
  }) => {
    const { engine, race } = await racer(target, contenderClients);
    const n = engine.names;
    await setClockOffset(engine, 0);
    const tally = { owner: 0, expired: 0, neither: 0 };
    const problems: string[] = [];
    for (let i = 0; i < SIDE_ITERATIONS; i++) {
      const run = await engine.client.enqueue(raced, {}, { retry: { ...NO_BACKOFF, maximumAttempts: 1 } });
      const [owner] = await claimOnce(engine);
      if (!owner) throw new Error(`iteration ${i}: nothing to claim`);
      const completes = i % 2 === 1;
      const boundary = boundaryOf(i, 8);
      const clock = expiryRace(engine, owner.id, boundary);
      const ownerWrite = completes
        ? (db: Database) => completeStep(db, n, { ...attemptRefOf(owner), output: {} })
        : async (db: Database) => {
            const [row] = await heartbeatSteps(db, n, [
              { stepId: owner.id, token: BigInt(owner.token), nonce: owner.nonce },
            ]);
            if (!row?.renewed) throw new Error('heartbeat rejected');
            return 'applied';
          };
      const expire = (db: Database) => expireSteps(db, n);
      const [mine, expired, ...rest] = await race<unknown>(
        [ownerWrite, expire, ...clock.ticks, ...claimers(engine, 8)],
        clock.place,
      );
      const claims = rest.slice(clock.ticks.length);
      if (!expired?.ok) throw expired?.error;
      if (grantsOf(claims).length > 0)
        problems.push(`iteration ${i}: a step with no attempts left was claimed`);
      const ownerWon = mine?.ok === true;
      const expiredIt = (expired.value as { id: string }[]).some((r) => r.id === owner.id);
      if (ownerWon && expiredIt) problems.push(`iteration ${i}: owner and expiry both won`);
      if (!ownerWon && completes && !(mine?.error instanceof LeaseLostError)) throw mine?.error;
      if (boundary === 'before' && !ownerWon) problems.push(`iteration ${i}: early expiry`);
      if (boundary === 'after' && ownerWon) problems.push(`iteration ${i}: late owner write accepted`);
      if (ownerWon) tally.owner++;
      else if (expiredIt) tally.expired++;
      else tally.neither++;
      if (!ownerWon && !expiredIt) await expireSteps(engine.database, n);
      // Leave nothing running for the next iteration's clock jump to expire.
      if (ownerWon && !completes)
        await completeStep(engine.database, n, { ...attemptRefOf(owner), output: {} });
      const step = await stepOfRun(engine, run.runId);
      const want = ownerWon ? 'completed' : 'failed';
      if (step.status !== want) problems.push(`iteration ${i}: step ${step.status}, expected ${want}`);
    }
    await annotate(`owner won ${tally.owner}, expiry won ${tally.expired}, neither ${tally.neither}`);
    expect(problems).toEqual([]);
    expect(tally.owner).toBeGreaterThan(0);
    expect(tally.expired).toBeGreaterThan(0);
    // Exactly one terminal event per step, and per run.
    const terminal = await engine.database.rows<{ steps: number; runs: number }>(sql`
      SELECT count(*) FILTER (WHERE step_id IS NOT NULL)::int AS steps, count(*) FILTER (WHERE step_id IS NULL)::int AS runs
        FROM ${n.runEvents} WHERE terminal`);
    expect(terminal).toEqual([{ steps: SIDE_ITERATIONS, runs: SIDE_ITERATIONS }]);
  });
});
