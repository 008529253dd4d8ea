/**
 * Eager turns and eager dispatch: the statement that records an activity's completion also claims the woken run's
 * next turn for the completing worker when that worker runs the workflow and has a turn slot free; the commit of a
 * turn grants the activities it schedules to the committing worker when it serves them and has slots free. Each
 * is an ordinary fenced grant (a new token from the global sequence, a new nonce, a lease on the database clock,
 * an attempts row), without a NOTIFY and a separate claim: a step of a sequential workflow costs one statement
 * each way. Anything else (another worker's activities or workflows, no free slot) takes the usual path, with the
 * same result. Eager start: a start on an engine whose worker runs the workflow's turns, with a turn slot free,
 * grants that worker the run's first turn in the statement that creates the run, and the turn starts at once.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { useEngineTarget, type EngineTarget } from '../support/engine.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';
import { oneStepWorkflow } from '../fixtures/one-step-workflow.js';
import { pureActivity } from '../fixtures/pure-activity.js';
import { attemptsOf, deferred, turnLog, lastTurn } from './workflow-rows.js';
import { add, counter } from './counter-workflow.js';
import { checkOnEvents, pollFor } from '../support/wait.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const double = pureActivity('double', z.object({ n: z.number() }), z.number(), ({ n }) => 2 * n);
const twice = oneStepWorkflow('twice', double);
const other = noInputWorkflow('other', z.null(), () => Promise.resolve(null));

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`eager turns on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('runs every turn after the first on the worker whose completion woke it, each a fenced grant', async () => {
      const engine = await target.engine();
      const worker = workerFor(engine, [counter, add], { pollIntervalMs: 60_000 });
      const turns = turnLog(worker);
      const grants: string[] = [];
      worker.events.on('attempt:claimed', (e) => grants.push(e.grant));
      await worker.start();
      const handle = await engine.client.start(counter, { steps: 12 });
      await expect(handle.result({ timeoutMs: 60_000 })).resolves.toEqual({ n: 12 });
      await lastTurn(worker, turns, handle.runId);

      const mine = turns.filter((t) => t.runId === handle.runId);
      expect(mine).toHaveLength(13);
      // The first turn was granted by start() itself (eager start: the worker is in the same engine); each later
      // one by the completion of the step before it, and continued the workflow instance this worker kept.
      expect(mine.map((t) => t.grant)).toEqual(Array<string>(13).fill('eager'));
      expect(mine.slice(1).every((t) => t.replay === 'continued')).toBe(true);
      // Every step was granted by the commit of the turn that scheduled it.
      expect(grants).toEqual(Array<string>(12).fill('eager'));

      // Attempts in grant order: turn, step, turn, step, …, turn — every token fresh and larger than the last.
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.map((a) => a.kind)).toEqual([
        'turn',
        ...Array.from({ length: 12 }, () => ['activity', 'turn']).flat(),
      ]);
      const tokens = attempts.map((a) => BigInt(a.token));
      expect(tokens.every((t, k) => k === 0 || t > (tokens[k - 1] as bigint))).toBe(true);
      expect(attempts.every((a) => a.outcome === 'completed')).toBe(true);
      expect(attempts.filter((a) => a.kind === 'turn').map((a) => a.epoch)).toEqual(
        Array.from({ length: 13 }, (_, k) => k + 1),
      );
      await worker.stop();
    });

    it('grants no turn or step to a worker that does not serve it: each goes to the one that does', async () => {
      const engine = await target.engine();
      const activities = workerFor(engine, [add], { pollIntervalMs: 60_000 });
      const workflows = workerFor(engine, [counter], { pollIntervalMs: 60_000 });
      const turns = turnLog(workflows);
      const grants: string[] = [];
      activities.events.on('attempt:claimed', (e) => grants.push(e.grant));
      await activities.start();
      await workflows.start();
      const handle = await engine.client.start(counter, { steps: 4 });
      await expect(handle.result({ timeoutMs: 60_000 })).resolves.toEqual({ n: 4 });
      await lastTurn(workflows, turns, handle.runId);
      // The first turn by start() (eager start: the workflow worker is in the engine); then every turn is claimed,
      // since the completions run on a worker that does not run the workflow's turns.
      expect(turns.filter((t) => t.runId === handle.runId).map((t) => t.grant)).toEqual([
        'eager',
        ...Array<string>(4).fill('claimed'),
      ]);
      expect(grants).toEqual(Array<string>(4).fill('claimed'));
      await activities.stop();
      await workflows.stop();
    });

    it('leaves the turn to the claim when the worker has no turn slot free, and every run still completes', async () => {
      const engine = await target.engine();
      const options = { workflowConcurrency: 1, concurrency: 8, pollIntervalMs: 60_000 };
      const worker = workerFor(engine, [counter, add], options);
      const turns = turnLog(worker);
      await worker.start();
      const handles = await Promise.all(
        Array.from({ length: 8 }, () => engine.client.start(counter, { steps: 5 })),
      );
      for (const h of handles) await expect(h.result({ timeoutMs: 60_000 })).resolves.toEqual({ n: 5 });
      // 8 runs × 6 turns, each run's turns in order, each committed once.
      await checkOnEvents(
        [worker],
        () => turns.filter((t) => t.outcome === 'completed').length === 8,
        'ends',
      );
      expect(turns).toHaveLength(48);
      await worker.stop();
    });

    it('grants the first turn to the local worker in the start statement; a repeated key grants nothing', async () => {
      const engine = await target.engine();
      const worker = workerFor(engine, [twice, double], { pollIntervalMs: 60_000 });
      const turns = turnLog(worker);
      await worker.start();
      const handle = await engine.client.start(twice, { n: 21 }, { key: 'k' });
      // The poll interval is a minute and no NOTIFY was sent for this turn: only the eager grant runs it.
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toBe(42);
      const again = await engine.client.start(twice, { n: 21 }, { key: 'k' });
      expect(again.runId).toBe(handle.runId);
      expect(again.created).toBe(false);
      await checkOnEvents([worker], () => turns.some((t) => t.outcome === 'completed'), 'the last turn');

      const first = turns.find((t) => t.runId === handle.runId);
      expect(first?.grant).toBe('eager');
      const [run] = await engine.database.rows<{ created_ms: number }>(sql`
        SELECT (extract(epoch FROM created_at) * 1000)::float8 AS created_ms
          FROM ${engine.names.runs} WHERE id = ${handle.runId}::uuid`);
      const attempts = await attemptsOf(engine, handle.runId);
      const turnAttempts = attempts.filter((a) => a.kind === 'turn');
      // Granted with the run: attempt and epoch 1, claimed at the run's creation, by this worker; then ended.
      expect(turnAttempts[0]).toMatchObject({
        attempt: 1,
        epoch: 1,
        worker_id: worker.workerId,
        outcome: 'completed',
      });
      expect(turnAttempts[0]?.claimed_at_ms).toBe(run?.created_ms);
      // Tokens come from the global sequence: the activity's grant, after the turn's, has a higher one.
      const step = attempts.find((a) => a.kind === 'activity');
      expect(BigInt(step?.token ?? 0)).toBeGreaterThan(BigInt(turnAttempts[0]?.token ?? 0));
      expect(turns.filter((t) => t.runId === handle.runId).length).toBe(turnAttempts.length);
      await worker.stop();
    });

    it('leaves the first turn to a claim when no worker of the engine runs the workflow', async () => {
      const engine = await target.engine();
      const worker = workerFor(engine, [other], { pollIntervalMs: 50 });
      const runner = workerFor(engine, [twice, double], { pollIntervalMs: 50 });
      const turns = turnLog(runner);
      await worker.start();
      // Started before the worker that runs it: nothing to grant it to.
      const handle = await engine.client.start(twice, { n: 1 });
      await runner.start();
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toBe(2);
      expect(turns.find((t) => t.runId === handle.runId)?.grant).toBe('claimed');
      await Promise.all([worker.stop(), runner.stop()]);
    });
  });
}

/**
 * Hold run `runId`'s row in a transaction of `admin` (FOR NO KEY UPDATE), so the engine's statements that lock it
 * queue behind (PostgreSQL only: PGlite runs one transaction at a time). `waiting(n)` resolves once n statements
 * of this database wait on a lock (the second queued statement waits behind the first, not the holder);
 * `release()` commits the holder.
 */
async function holdRunRow(admin: ReturnType<EngineTarget['sql']>, schema: string, runId: string) {
  const locked = deferred();
  const release = deferred();
  const holder = admin.begin(async (tx) => {
    await tx`SELECT 1 FROM ${tx(schema)}.runs WHERE id = ${runId} FOR NO KEY UPDATE`;
    locked.resolve();
    await release.promise;
  });
  await locked.promise;
  return {
    waiting: (n: number) =>
      pollFor(`${n} statements to wait on the run row`, async () => {
        const [row] = await admin<{ n: number }[]>`
          SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0`;
        return row?.n === n ? true : undefined;
      }),
    release: async () => {
      release.resolve();
      await holder;
    },
  };
}

describe('eager turns when the worker stops, on postgres', () => {
  const target = useEngineTarget('postgres');

  // PostgreSQL only: the completion statement is held on the run row by another transaction, which PGlite (one
  // transaction at a time) cannot have.
  it('hands back, unstarted, a turn that a completion in flight when stop() began claims for it', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const finish = deferred();
    const held = emptyActivity('held', {
      async run() {
        await finish.promise;
        return {};
      },
    });
    const once = noInputWorkflow('once', z.object({ done: z.boolean() }), async (ctx) => {
      await ctx.run(held, {});
      return { done: true };
    });
    const first = workerFor(engine, [once, held], { pollIntervalMs: 60_000, workerId: 'first' });
    const turns = turnLog(first);
    await first.start();
    const started = new Promise<void>((resolve) => first.events.once('attempt:started', () => resolve()));
    const handle = await engine.client.start(once, {});
    await started;

    // Hold the run row, so the completion statement (which claims the woken turn for `first`) waits on it.
    const lock = await holdRunRow(admin, engine.schema, handle.runId);
    finish.resolve();
    await lock.waiting(1);

    const stopping = first.stop({ graceMs: 10_000 });
    const committedBeforeStop = turns.length;
    await lock.release();
    await stopping;

    // The completion claimed the next turn for `first` (it was running when the statement was sent), and `first`
    // handed it back without running it.
    expect(turns).toHaveLength(committedBeforeStop);
    const turnAttempts = (await attemptsOf(engine, handle.runId)).filter((a) => a.kind === 'turn');
    expect(turnAttempts.map((a) => [a.worker_id, a.outcome])).toEqual([
      ['first', 'completed'],
      ['first', 'released'],
    ]);

    const second = await startWorker(engine, [once, held], { pollIntervalMs: 60_000, workerId: 'second' });
    await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ done: true });
    await second.stop();
  });
});

describe('eager turns whose grant missed a writer of the run row, on postgres', () => {
  const target = useEngineTarget('postgres');

  // PostgreSQL only: two statements are queued on the run row behind another transaction, which PGlite (one
  // transaction at a time) cannot have.
  it('continues the kept instance when another writer of the run row commits between a completion’s snapshot and its lock', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const started = deferred();
    const finish = deferred();
    const step = defineActivity({
      name: 'step',
      input: z.object({ n: z.number() }),
      output: z.object({ n: z.number() }),
      async run({ n }) {
        if (n === 0) {
          started.resolve();
          await finish.promise;
        }
        return { n: n + 1 };
      },
    });
    const pair = noInputWorkflow('pair', z.object({ n: z.number() }), async (ctx) => {
      const { n } = await ctx.run(step, { n: 0 });
      return ctx.run(step, { n });
    });
    const worker = workerFor(engine, [pair, step], { pollIntervalMs: 60_000 });
    const turns = turnLog(worker);
    await worker.start();
    const handle = await engine.client.start(pair, {});
    await started.promise;

    // Hold the run row; queue on it first another writer (a result() registration was one before it had a row of
    // its own: issue 26), then the completion of step 0 (whose snapshot is taken before that write commits, and
    // which claims the next turn for this worker).
    const lock = await holdRunRow(admin, engine.schema, handle.runId);
    const writer = target.sql();
    const wrote = writer`
      UPDATE ${writer(engine.schema)}.runs SET priority = priority WHERE id = ${handle.runId}`.execute();
    await lock.waiting(1);
    finish.resolve();
    await lock.waiting(2);
    await lock.release();
    await wrote;
    await expect(handle.result({ timeoutMs: 60_000 })).resolves.toEqual({ n: 2 });
    await lastTurn(worker, turns, handle.runId);

    // The completion's grant could not carry the news (its snapshot predates the other write of the run row); the worker read the news on its own and continued the kept instance, as it did on the last turn.
    const mine = turns.filter((t) => t.runId === handle.runId);
    expect(mine.map((t) => [t.grant, t.replay])).toEqual([
      ['eager', 'full'],
      ['eager', 'continued'],
      ['eager', 'continued'],
    ]);
    await worker.stop();
  });

  // PostgreSQL only, as above.
  it('continues the kept instance from news read on its own when a completion’s snapshot missed another one', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const started = { left: deferred(), right: deferred() };
    const finish = { left: deferred(), right: deferred() };
    const left = defineActivity({
      name: 'left',
      input: z.object({ again: z.boolean() }),
      output: z.number(),
      async run({ again }) {
        if (!again) {
          started.left.resolve();
          await finish.left.promise;
        }
        return 1;
      },
    });
    const right = noInputActivity('right', z.number(), async () => {
      started.right.resolve();
      await finish.right.promise;
      return 2;
    });
    const fork = noInputWorkflow('fork', z.number(), async (ctx) => {
      const [a, b] = await Promise.all([ctx.run(left, { again: false }), ctx.run(right, {})]);
      return a + b + (await ctx.run(left, { again: true }));
    });
    // `main` runs the workflow and `left`; `other` runs only `right`, so its completion claims no turn.
    const main = workerFor(engine, [fork, left], { pollIntervalMs: 60_000, workerId: 'main' });
    const other = workerFor(engine, [right], { pollIntervalMs: 50, workerId: 'other' });
    const turns = turnLog(main);
    await main.start();
    await other.start();
    const handle = await engine.client.start(fork, {});
    await Promise.all([started.left.promise, started.right.promise]);

    // Hold the run row; queue on it first `right`'s completion, then `left`'s, whose snapshot is taken before
    // `right`'s commits and which claims the next turn for `main` (its grant cannot carry the news).
    const lock = await holdRunRow(admin, engine.schema, handle.runId);
    finish.right.resolve();
    await lock.waiting(1);
    finish.left.resolve();
    await lock.waiting(2);
    await lock.release();
    await expect(handle.result({ timeoutMs: 60_000 })).resolves.toBe(4);
    await lastTurn(main, turns, handle.runId);

    // Every turn after the first continued the instance `main` kept; none read the whole history. (The second
    // turn is the eager one `left`'s completion claimed, unless a loaded machine had it handed back and claimed
    // anew: then its claim saw both completions and carried the news itself.)
    const mine = turns.filter((t) => t.runId === handle.runId);
    expect(mine[0]).toMatchObject({ grant: 'eager', replay: 'full' });
    expect(mine.length).toBeGreaterThanOrEqual(3);
    expect(mine.slice(1).map((t) => t.replay)).toEqual(mine.slice(1).map(() => 'continued'));
    await Promise.all([main.stop(), other.stop()]);
  });
});
