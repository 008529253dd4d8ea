/**
 * Retention: `engine.pruneRuns({ olderThanMs })` and the workers' background sweep of `createEngine({ retentionMs })`
 * delete the runs that ended before the cutoff (by the database clock, aged here with time travel) with every
 * row that belongs to them, never a run that has not ended, and free their idempotency keys.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sql } from 'drizzle-orm';
import {
  ApplicationFailure,
  defineActivity,
  defineSignal,
  defineWorkflow,
  isPalisadeError,
} from '@palisade/sdk';
import { createEngine, type Engine, type WorkerEventMap } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { nextEvent, useEngineTarget } from '../support/engine.js';
import type postgres from '@palisade/engine/postgres';
import { afterLockWait } from '../support/lock-wait.js';
import { holdActivity } from './held-activity.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const HOUR_MS = 3_600_000;

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number().int() }),
  output: z.object({ n: z.number().int() }),
  run: (input) => Promise.resolve({ n: input.n * 2 }),
});

const refuse = emptyActivity('refuse', {
  run: () => Promise.reject(new ApplicationFailure('no', { type: 'Refused', nonRetryable: true })),
});

/** Served by no worker in these tests: its runs stay pending until cancelled. */
const unserved = emptyActivity('unserved');

const nudge = defineSignal({ name: 'nudge', payload: z.object({}) });

const sleeper = defineWorkflow({
  name: 'sleeper',
  input: z.object({}),
  output: z.object({}),
  async run(_input, ctx) {
    await ctx.sleep('365d');
    return {};
  },
});

interface RowCounts {
  runs: number;
  steps: number;
  attempts: number;
  events: number;
  /** Not in a prune's counts (those are the history `runs show` lists), but deleted with the run. */
  signals: number;
}

const NONE: RowCounts = { runs: 0, steps: 0, attempts: 0, events: 0, signals: 0 };

/** What a prune reports of `counts`: every table but `signals`. */
function history({ signals: _signals, ...counts }: RowCounts): Omit<RowCounts, 'signals'> {
  return counts;
}

/**
 * Rows of `runIds` in each table that holds a run's rows, as stored. `steps`, `attempts` and `signals` have no
 * foreign key to `runs` (nothing would cascade, and nothing would refuse an orphan): only a count shows that a
 * prune took them.
 */
async function rowsOf(engine: Engine, runIds: readonly string[]): Promise<RowCounts> {
  const n = engine.names;
  const ids = JSON.stringify(runIds);
  const inIds = (table: typeof n.runs, column: string) =>
    sql`(SELECT count(*)::int FROM ${table} WHERE ${sql.raw(column)} IN
          (SELECT (jsonb_array_elements_text(${ids}::jsonb))::uuid))`;
  const [row] = await engine.database.rows<RowCounts>(sql`
    SELECT ${inIds(n.runs, 'id')} AS runs, ${inIds(n.steps, 'run_id')} AS steps,
           ${inIds(n.attempts, 'run_id')} AS attempts, ${inIds(n.events, 'run_id')} AS events,
           ${inIds(n.signals, 'run_id')} AS signals`);
  if (!row) throw new Error('no counts');
  return row;
}

/**
 * One run of each ending: two completed, one failed, one cancelled; and a workflow run cancelled with a signal it
 * never took (kept, with the run); returns their ids.
 */
async function finishedRuns(engine: Engine): Promise<string[]> {
  const worker = engine.worker({ activities: [double, refuse], workflows: [sleeper], pollIntervalMs: 50 });
  await worker.start();
  const blocked = nextEvent<WorkerEventMap['turn:committed'][0]>(
    worker.events,
    'turn:committed',
    (e) => e.workflow === 'sleeper' && e.outcome === 'blocked',
  );
  const signalled = await engine.client.start(sleeper, {});
  await blocked;
  await engine.client.signal(signalled.runId, nudge, {});
  await signalled.cancel('test');
  await expect(signalled.result({ timeoutMs: 20_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
  const a = await engine.client.enqueue(double, { n: 1 });
  const b = await engine.client.enqueue(double, { n: 2 });
  const c = await engine.client.enqueue(refuse, {});
  const d = await engine.client.enqueue(unserved, {});
  await expect(a.result({ timeoutMs: 20_000 })).resolves.toEqual({ n: 2 });
  await expect(b.result({ timeoutMs: 20_000 })).resolves.toEqual({ n: 4 });
  await expect(c.result({ timeoutMs: 20_000 })).rejects.toThrow(/no/);
  await d.cancel('test');
  await worker.stop({ graceMs: 1_000 });
  const runs = [a, b, c, d, signalled];
  const statuses = await Promise.all(runs.map(async (h) => (await h.describe()).run.status));
  expect(statuses).toEqual(['completed', 'completed', 'failed', 'cancelled', 'cancelled']);
  return runs.map((h) => h.runId);
}

/**
 * Insert `count` finished runs directly, each with one step, one attempt, one event and one signal, that ended
 * `agoMs` before the database clock (for volume: real runs would take the test minutes). `status` and
 * `parentRunId` as given. Returns their ids.
 */
async function insertRuns(
  engine: Engine,
  p: { count: number; agoMs: number; status?: string; parentRunId?: string },
): Promise<string[]> {
  const n = engine.names;
  const status = p.status ?? 'completed';
  const ended = ['completed', 'failed', 'cancelled'].includes(status);
  const rows = await engine.database.rows<{ id: string }>(sql`
    WITH runs AS (
      INSERT INTO ${n.runs} (kind, name, status, queue, parent_run_id, finished_at, created_at)
      SELECT 'activity', 'bulk', ${status}, 'default', ${p.parentRunId ?? null}::uuid,
             CASE WHEN ${ended} THEN ${n.now} - ${p.agoMs} * interval '1 millisecond' END,
             ${n.now} - (${p.agoMs} + 1000) * interval '1 millisecond'
        FROM generate_series(1, ${p.count})
      RETURNING id),
    policy AS (
      INSERT INTO ${n.policies} (id, retry_policy, lease_ms, start_to_close_timeout_ms)
      VALUES (${n.policyId}('{}'::jsonb, 30000, 60000), '{}'::jsonb, 30000, 60000)
      ON CONFLICT DO NOTHING
      RETURNING 1),
    steps AS (
      INSERT INTO ${n.steps} (run_id, seq, kind, name, status, queue, fencing_scope, policy_id)
      SELECT id, 1, 'activity', 'bulk', 'completed', 'default', 'run:' || id,
             ${n.policyId}('{}'::jsonb, 30000, 60000) FROM runs
      RETURNING id, run_id),
    attempts AS (
      INSERT INTO ${n.attemptRecords} (run_id, step_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at)
      SELECT run_id, id, 'activity', 1, 1, ${n.nextToken}, gen_random_uuid(), 'w', ${n.now} FROM steps
      RETURNING 1),
    events AS (
      INSERT INTO ${n.events} (run_id, type, at) SELECT id, 'run:completed', ${n.now} FROM runs RETURNING 1),
    signals AS (
      INSERT INTO ${n.signals} (run_id, name, payload, request_id, created_at)
      SELECT id, 'nudge', '{}'::jsonb, gen_random_uuid(), ${n.now} FROM runs RETURNING 1)
    SELECT id::text FROM runs
     WHERE (SELECT count(*) FROM attempts) + (SELECT count(*) FROM events) + (SELECT count(*) FROM signals) > 0`);
  return rows.map((r) => r.id);
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`retention on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('deletes the runs that ended before the cutoff with all their rows, and keeps the younger ones', async () => {
      const engine = await target.engine();
      const old = await finishedRuns(engine);
      const before = await rowsOf(engine, old);
      expect(before.runs).toBe(5);
      expect(before.steps).toBe(5); // one per activity run, the sleeper's timer
      // The cancelled job's step was never claimed; the sleeper has its turns' attempts (two or more).
      expect(before.attempts).toBeGreaterThanOrEqual(5);
      expect(before.events).toBeGreaterThan(0); // stored events (the run_events view derives the others)
      expect(before.signals).toBe(1);

      await advanceClock(engine, 2 * HOUR_MS);
      const young = await finishedRuns(engine);
      const youngBefore = await rowsOf(engine, young);

      const dry = await engine.pruneRuns({ olderThanMs: '1h', dryRun: true });
      expect(dry).toEqual({ ...history(before), olderThanMs: HOUR_MS, dryRun: true });
      expect(await rowsOf(engine, old)).toEqual(before); // a dry run deletes nothing

      const pruned = await engine.pruneRuns({ olderThanMs: HOUR_MS });
      expect(pruned).toEqual({ ...history(before), olderThanMs: HOUR_MS, dryRun: false });
      expect(await rowsOf(engine, old)).toEqual(NONE);
      expect(await rowsOf(engine, young)).toEqual(youngBefore);
      expect((await engine.client.list()).map((r) => r.id).sort()).toEqual([...young].sort());

      expect(await engine.pruneRuns({ olderThanMs: '1h' })).toMatchObject({ runs: 0, steps: 0 });
    });

    it('never deletes a run that has not ended, however old, even with a finished_at set', async () => {
      const engine = await target.engine();
      const held = holdActivity('held', { leaseMs: 60_000 });
      const worker = engine.worker({ activities: [held.activity], workflows: [sleeper], pollIntervalMs: 50 });
      await worker.start();
      const pending = await engine.client.enqueue(unserved, {});
      const running = await engine.client.enqueue(held.activity, {});
      await held.next();
      const sleeping = await engine.client.start(sleeper, {});
      await nextEvent<WorkerEventMap['turn:committed'][0]>(
        worker.events,
        'turn:committed',
        (e) => e.runId === sleeping.runId && e.outcome === 'blocked',
      );
      await worker.stop({ graceMs: 0 });
      const ids = [pending.runId, running.runId, sleeping.runId];
      const statuses = await Promise.all(
        ids.map(async (id) => (await engine.client.getHandle(id).describe()).run.status),
      );
      expect(statuses.every((s) => s === 'pending' || s === 'running')).toBe(true);
      // Only the status keeps them: give them an ancient finished_at, as no engine path would.
      await engine.database.rows(sql`
        UPDATE ${engine.names.runs} SET finished_at = ${engine.names.now} - interval '1 day'
         WHERE id IN (${sql.join(
           ids.map((id) => sql`${id}::uuid`),
           sql`, `,
         )})`);
      const before = await rowsOf(engine, ids);
      await advanceClock(engine, 30 * 24 * HOUR_MS);

      expect(await engine.pruneRuns({ olderThanMs: '1h', dryRun: true })).toMatchObject({ runs: 0 });
      expect(await engine.pruneRuns({ olderThanMs: '1h' })).toMatchObject({
        runs: 0,
        steps: 0,
        attempts: 0,
        events: 0,
      });
      expect(await rowsOf(engine, ids)).toEqual(before);
    });

    it('frees the idempotency key of a pruned run: the same key then starts a new run', async () => {
      const engine = await target.engine();
      const worker = engine.worker({ activities: [double], pollIntervalMs: 50 });
      await worker.start();
      const first = await engine.client.enqueue(double, { n: 1 }, { key: 'order-7' });
      await first.result({ timeoutMs: 20_000 });
      expect((await engine.client.enqueue(double, { n: 1 }, { key: 'order-7' })).runId).toBe(first.runId);

      await advanceClock(engine, 2 * HOUR_MS);
      expect(await engine.pruneRuns({ olderThanMs: '1h' })).toMatchObject({ runs: 1 });

      const second = await engine.client.enqueue(double, { n: 5 }, { key: 'order-7' });
      expect(second.runId).not.toBe(first.runId);
      await expect(second.result({ timeoutMs: 20_000 })).resolves.toEqual({ n: 10 });
    });

    it('deletes every prunable run when there are more than one batch of them', async () => {
      const engine = await target.engine();
      const old = await insertRuns(engine, { count: 1_234, agoMs: 2 * HOUR_MS });
      const young = await insertRuns(engine, { count: 3, agoMs: 10 * 60_000 });
      expect(await engine.pruneRuns({ olderThanMs: '1h', dryRun: true })).toMatchObject({ runs: 1_234 });
      expect(await engine.pruneRuns({ olderThanMs: '1h' })).toEqual({
        runs: 1_234,
        steps: 1_234,
        attempts: 1_234,
        events: 1_234,
        olderThanMs: HOUR_MS,
        dryRun: false,
      });
      expect(await rowsOf(engine, old)).toEqual(NONE);
      expect(await rowsOf(engine, young)).toEqual({ runs: 3, steps: 3, attempts: 3, events: 3, signals: 3 });
    });

    it('keeps a parent while a child run that must be kept names it, and deletes children before parents', async () => {
      const engine = await target.engine();
      const [parent] = await insertRuns(engine, { count: 1, agoMs: 2 * HOUR_MS });
      if (!parent) throw new Error('no parent');
      const [child] = await insertRuns(engine, {
        count: 1,
        agoMs: 0,
        status: 'running',
        parentRunId: parent,
      });
      if (!child) throw new Error('no child');

      expect(await engine.pruneRuns({ olderThanMs: '1h', dryRun: true })).toMatchObject({ runs: 0 });
      expect(await engine.pruneRuns({ olderThanMs: '1h' })).toMatchObject({ runs: 0 });
      expect((await rowsOf(engine, [parent, child])).runs).toBe(2);

      // The child ends long ago too: both go, the child in one batch and its parent in the next.
      await engine.database.rows(sql`
        UPDATE ${engine.names.runs} SET status = 'completed', finished_at = ${engine.names.now} - interval '2 hours',
                                        created_at = least(created_at, ${engine.names.now} - interval '3 hours')
         WHERE id = ${child}::uuid`);
      const [grandchild] = await insertRuns(engine, { count: 1, agoMs: 2 * HOUR_MS, parentRunId: child });
      if (!grandchild) throw new Error('no grandchild');
      expect(await engine.pruneRuns({ olderThanMs: '1h', dryRun: true })).toMatchObject({ runs: 3 });
      expect(await engine.pruneRuns({ olderThanMs: '1h' })).toMatchObject({ runs: 3 });
      expect(await rowsOf(engine, [parent, child, grandchild])).toEqual(NONE);
    });

    it('with createEngine({ retentionMs }), a worker deletes finished runs past it in the background', async () => {
      const engine = await target.engine({ retentionMs: '1h' });
      const first = engine.worker({ activities: [double], pollIntervalMs: 50 });
      const firstSweep = nextEvent<WorkerEventMap['retention:pruned'][0]>(first.events, 'retention:pruned');
      await first.start();
      expect(await firstSweep).toEqual({ runs: 0, steps: 0, attempts: 0, events: 0, olderThanMs: HOUR_MS });
      const handles = await Promise.all([1, 2, 3].map((n) => engine.client.enqueue(double, { n })));
      for (const h of handles) await h.result({ timeoutMs: 20_000 });
      await first.stop({ graceMs: 1_000 });
      const old = handles.map((h) => h.runId);
      const before = await rowsOf(engine, old);

      await advanceClock(engine, 2 * HOUR_MS);
      const young = await engine.client.enqueue(unserved, {});
      const second = engine.worker({ activities: [double], pollIntervalMs: 50 });
      const sweep = nextEvent<WorkerEventMap['retention:pruned'][0]>(second.events, 'retention:pruned');
      await second.start();
      expect(await sweep).toEqual({ ...history(before), olderThanMs: HOUR_MS });
      expect(await rowsOf(engine, old)).toEqual(NONE);
      expect((await young.describe()).run.status).toBe('pending');
    });

    it('deletes the watcher rows of waiters that died, and keeps those of waiters still pushing them forward', async () => {
      const engine = await target.engine();
      const run = await engine.client.enqueue(unserved, {});
      const watchers = sql.raw(`"${engine.schema}"."run_watchers"`);
      // A waiter that died: its row stays until it lapses (10 minutes after it was last pushed forward).
      await engine.database.rows(sql`
        INSERT INTO ${watchers} (id, run_id, turns, expires_at)
        VALUES (gen_random_uuid(), ${run.runId}::uuid, true, ${engine.names.now} + interval '10 minutes')`);
      await advanceClock(engine, 11 * 60_000);
      // A live one, registered now.
      const live = run.watch();
      await live.next();
      await engine.pruneRuns({ olderThanMs: '1h' });
      const rows = await engine.database.rows<{ expired: boolean }>(
        sql`SELECT expires_at < ${engine.names.now} AS expired FROM ${watchers} WHERE run_id = ${run.runId}::uuid`,
      );
      expect(rows).toEqual([{ expired: false }]);
      await live.return();
      await run.cancel('test over');
    });
  });
}

describe('operator calls that wait on a run a prune deletes, on postgres', () => {
  const target = useEngineTarget('postgres');

  /** A failed standalone run, and a transaction-holding client on the engine's database. */
  async function failedRun() {
    const engine = await target.engine();
    const worker = engine.worker({ activities: [refuse], pollIntervalMs: 50 });
    await worker.start();
    const handle = await engine.client.enqueue(refuse, {});
    await expect(handle.result({ timeoutMs: 20_000 })).rejects.toThrow(/no/);
    await worker.stop({ graceMs: 1_000 });
    const admin = target.sql();
    // What a prune's statement deletes of a run (its other rows do not matter to the calls).
    const prune = (tx: postgres.TransactionSql) =>
      tx`DELETE FROM ${tx(engine.schema)}.runs WHERE id = ${handle.runId}`;
    return { engine, handle, admin, prune };
  }

  it('reports RUN_NOT_FOUND for a retry that waited on the run while a prune deleted it', async () => {
    const { engine, handle, admin, prune } = await failedRun();
    const outcome = await afterLockWait(admin, prune, () => engine.client.retry(handle.runId));
    expect(outcome.ok).toBe(false);
    if (!outcome.ok) expect(isPalisadeError(outcome.error, 'RUN_NOT_FOUND')).toBe(true);
  });

  it('reports the status a retry found once it held the run, not the one it read before waiting', async () => {
    const { engine, handle, admin } = await failedRun();
    const outcome = await afterLockWait(
      admin,
      (tx) => tx`UPDATE ${tx(engine.schema)}.runs SET status = 'pending' WHERE id = ${handle.runId}`,
      () => engine.client.retry(handle.runId),
    );
    expect(outcome.ok).toBe(false);
    if (!outcome.ok) {
      expect(isPalisadeError(outcome.error, 'INVALID_OPTIONS')).toBe(true);
      expect((outcome.error as Error).message).toMatch(/is pending; only failed or cancelled/);
    }
  });

  it('reports RUN_NOT_FOUND for a cancel that waited on the run while a prune deleted it', async () => {
    const { handle, admin, prune } = await failedRun();
    const outcome = await afterLockWait(admin, prune, () => handle.cancel('late'));
    expect(outcome.ok).toBe(false);
    if (!outcome.ok) expect(isPalisadeError(outcome.error, 'RUN_NOT_FOUND')).toBe(true);
  });
});

describe('retention options', () => {
  it('refuses a retentionMs that is not a duration, naming the option and the value', async () => {
    const attempt = createEngine({ retentionMs: '30x', dataDir: 'memory://' });
    await expect(attempt).rejects.toThrow(/^\[INVALID_OPTIONS\].*retentionMs: "30x" is not a duration/s);
    await expect(attempt).rejects.toSatisfy((e) => isPalisadeError(e, 'INVALID_OPTIONS'));
  });

  it('refuses a retentionMs under a minute and a negative number', async () => {
    await expect(createEngine({ retentionMs: '30s', dataDir: 'memory://' })).rejects.toThrow(
      /retentionMs: must be ≥ 1 minute/,
    );
    await expect(createEngine({ retentionMs: -5, dataDir: 'memory://' })).rejects.toThrow(
      /retentionMs: -5 is not a duration/,
    );
  });

  it('refuses a bad olderThanMs of pruneRuns before touching the database', async () => {
    const engine = await createEngine({ dataDir: 'memory://' });
    try {
      await expect(engine.pruneRuns({ olderThanMs: '30x' })).rejects.toThrow(
        /^\[INVALID_OPTIONS\].*olderThanMs: "30x" is not a duration/s,
      );
      await expect(engine.pruneRuns({} as { olderThanMs: string })).rejects.toThrow(/olderThanMs/);
      await expect(engine.pruneRuns({ olderThanMs: '200000d' })).rejects.toThrow(/olderThanMs: .*too long/);
    } finally {
      await engine.close();
    }
  });
});
