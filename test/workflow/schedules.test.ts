/**
 * Durable schedules (`engine.schedules`): create / list / get / update / pause / resume / trigger / backfill /
 * delete; bad options named; exactly one run per (schedule, tick) with several engines evaluating at once; the
 * overlap policies; catch-up after downtime (F05) and pause/resume without a backlog. Time moves by time travel
 * (the database clock's offset) and ticks are fired by `engine.schedules.evaluate()` — what every worker does on
 * its timer — except in the test of workers firing by themselves.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineWorkflow, isPalisadeError } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { advanceClock, setFaultHook } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { claimTimesMs, maxInWindow } from '../support/flow-audit.js';
import { workerEvent } from '../worker/helpers.js';
import { dbNowMs, deferred, stepsOf } from './workflow-rows.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, workerFor } from '../support/worker.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;
const DAY_MS = 24 * HOUR_MS;

const report = defineWorkflow({
  name: 'report',
  input: z.object({ region: z.string().min(1) }),
  output: z.string(),
  run: ({ region }) => Promise.resolve(`report for ${region}`),
});

/** A standalone job nobody serves in these tests: its runs stay pending (live) until cancelled. */
const sync = pureActivity('sync', z.object({ table: z.string() }), z.null(), () => null);

interface TickRun {
  id: string;
  schedule_id: string;
  tick_ms: number;
  created_ms: number;
  status: string;
}

/** The runs schedules made, oldest tick first (both times by the database clock). */
async function scheduleRuns(engine: Engine, scheduleId?: string): Promise<TickRun[]> {
  return engine.database.rows<TickRun>(sql`
    SELECT id::text, schedule_id, round(extract(epoch FROM schedule_tick_at) * 1000)::float8 AS tick_ms,
           round(extract(epoch FROM created_at) * 1000)::float8 AS created_ms, status
      FROM ${engine.names.runs}
     WHERE schedule_id IS NOT NULL AND (${scheduleId ?? null}::text IS NULL OR schedule_id = ${scheduleId ?? null})
     ORDER BY schedule_id, schedule_tick_at`);
}

/** Move the database clock to 5 s after the next whole minute, so schedules created next share their first tick. */
async function alignToMinute(engine: Engine): Promise<void> {
  await moveClockTo(engine, Math.ceil((await dbNowMs(engine)) / MINUTE_MS) * MINUTE_MS, 5_000);
}

/** Move the database clock to `offsetMs` after `atMs` (a tick), wherever it is now. */
async function moveClockTo(engine: Engine, atMs: number, offsetMs = 0): Promise<void> {
  await advanceClock(engine, atMs + offsetMs - (await dbNowMs(engine)));
}

async function expectCode(promise: Promise<unknown>, code: string, ...mentions: string[]): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isPalisadeError(error, code as never), String(error)).toBe(true);
  for (const m of mentions) expect((error as Error).message).toContain(m);
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`schedules (${driver})`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('creates, lists, updates, pauses, resumes and deletes a schedule, by the database clock', async () => {
      const engine = await target.engine();
      await advanceClock(engine, 5 * DAY_MS); // the database clock, not this process's, sets the first tick
      const now = await dbNowMs(engine);
      const created = await engine.schedules.create({
        id: 'nightly',
        cron: '30 2 * * *',
        timezone: 'Europe/Berlin',
        workflow: report,
        input: { region: 'eu' },
      });
      expect(created).toMatchObject({
        id: 'nightly',
        spec: { cron: '30 2 * * *', timezone: 'Europe/Berlin' },
        target: { kind: 'workflow', name: 'report' },
        input: { region: 'eu' },
        overlap: 'skip',
        catchup: 'latest',
        queue: 'default',
        priority: 0,
        paused: false,
        lastRunId: null,
        skippedTicks: 0,
      });
      expect(created.nextTickAt.getTime()).toBeGreaterThan(now);
      expect(created.nextTickAt.getTime()).toBeLessThanOrEqual(now + DAY_MS);
      const berlin = new Intl.DateTimeFormat('en-GB', {
        timeZone: 'Europe/Berlin',
        hour: '2-digit',
        minute: '2-digit',
      });
      expect(berlin.format(created.nextTickAt)).toBe('02:30');

      await engine.schedules.create({ id: 'every-5m', everyMs: '5m', activity: sync, input: { table: 'a' } });
      expect((await engine.schedules.list()).map((s) => s.id)).toEqual(['every-5m', 'nightly']);
      const every = await engine.schedules.get('every-5m');
      expect(every.spec).toEqual({ everyMs: 300_000 });
      expect(every.nextTickAt.getTime() % 300_000).toBe(0);

      const updated = await engine.schedules.update('nightly', {
        everyMs: '1h',
        overlap: 'allow-all',
        catchup: { all: { windowMs: '10m' } },
        priority: 5,
      });
      expect(updated).toMatchObject({
        spec: { everyMs: HOUR_MS },
        overlap: 'allow-all',
        catchup: { all: { windowMs: 600_000 } },
        priority: 5,
      });
      expect(updated.version).toBe(created.version + 1);
      expect(updated.nextTickAt.getTime() % HOUR_MS).toBe(0);
      const retargeted = await engine.schedules.update('nightly', { activity: sync, input: { table: 'b' } });
      expect(retargeted.target).toEqual({ kind: 'activity', name: 'sync' });
      expect(retargeted.input).toEqual({ table: 'b' });

      expect((await engine.schedules.pause('nightly')).paused).toBe(true);
      expect((await engine.schedules.resume('nightly')).paused).toBe(false);
      await engine.schedules.delete('nightly');
      await expectCode(engine.schedules.get('nightly'), 'SCHEDULE_NOT_FOUND', 'nightly');
      expect((await engine.schedules.list()).map((s) => s.id)).toEqual(['every-5m']);
      await engine.close();
      await expectCode(engine.schedules.list(), 'ENGINE_CLOSED', 'schedules.list');
      await expectCode(engine.schedules.trigger('every-5m'), 'ENGINE_CLOSED', 'schedules.trigger');
    });

    it('refuses bad options with an error naming the option, and unknown ids naming the id', async () => {
      const engine = await target.engine();
      const base = { id: 's', workflow: report, input: { region: 'eu' } };
      const cases: [Record<string, unknown>, string][] = [
        [{ ...base, cron: '61 * * * *' }, 'cron: "61 * * * *" is not a valid cron expression'],
        [{ ...base, cron: 'every tuesday' }, 'cron: "every tuesday" is not a valid cron expression'],
        // A date is no cron pattern (croner would read it as one run at that time, and never fire it here).
        [
          { ...base, cron: '2030-01-01T00:00:00Z' },
          'cron: "2030-01-01T00:00:00Z" is not a valid cron expression',
        ],
        [{ ...base, cron: '* * * * *', timezone: 'Mars/Olympus' }, 'timezone: "Mars/Olympus" is not an IANA'],
        [{ ...base, cron: '* * * * *', everyMs: '1m' }, 'cron: give either cron or everyMs, not both'],
        [base, 'cron: give cron (a cron expression) or everyMs'],
        [{ ...base, everyMs: '1m', timezone: 'UTC' }, 'timezone: applies only to cron schedules'],
        [{ ...base, everyMs: 500 }, 'everyMs: must be ≥ 1 s'],
        [{ ...base, everyMs: 'soon' }, 'everyMs:'],
        [{ ...base, everyMs: '1m', activity: sync }, 'workflow: give either workflow or activity'],
        [{ id: 's', everyMs: '1m', input: {} }, 'workflow: give the workflow'],
        [{ ...base, everyMs: '1m', overlap: 'queue' }, 'overlap:'],
        [
          { ...base, everyMs: '1m', catchup: 'everything' },
          "catchup: must be 'none', 'latest' or { all: { windowMs } }",
        ],
        [{ ...base, everyMs: '1m', catchup: { all: { windowMs: 0 } } }, 'catchup.all.windowMs: must be > 0'],
        [{ ...base, everyMs: '1m', queue: 'no spaces' }, 'queue:'],
        [{ ...base, id: '', everyMs: '1m' }, 'id: must not be empty'],
        [{ ...base, everyMs: '1m', color: 'red' }, 'color'],
      ];
      for (const [options, message] of cases) {
        await expectCode(engine.schedules.create(options as never), 'INVALID_OPTIONS', message);
      }
      await expectCode(
        engine.schedules.create({ ...base, everyMs: '1m', input: { region: '' } }),
        'VALIDATION_FAILED',
        'input of schedule s (workflow report)',
        'region',
      );
      expect(await engine.schedules.list()).toEqual([]); // nothing refused was stored

      const created = await engine.schedules.create({ ...base, everyMs: '1m' });
      // The same id with the same options is the same schedule (a retry, an application's every start).
      expect(await engine.schedules.create({ ...base, everyMs: '1m' })).toEqual(created);
      await expectCode(
        engine.schedules.create({ ...base, everyMs: '2m' }),
        'SCHEDULE_EXISTS',
        'schedule s already exists with other options',
      );
      await expectCode(
        engine.schedules.create({ ...base, everyMs: '1m', input: { region: 'us' } }),
        'SCHEDULE_EXISTS',
      );
      await expectCode(
        engine.schedules.update('s', { input: { region: 'us' } }),
        'INVALID_OPTIONS',
        'input: give the workflow',
      );
      await expectCode(engine.schedules.update('s', { cron: 'nope' }), 'INVALID_OPTIONS', 'cron:');
      await expectCode(
        engine.schedules.backfill('s', { from: Date.now(), to: Date.now() + DAY_MS }),
        'INVALID_OPTIONS',
        'to:',
        'later than now by the database clock',
      );
      await expectCode(
        engine.schedules.backfill('s', { from: 'yesterday', to: new Date() }),
        'INVALID_OPTIONS',
        'from: yesterday is not a time',
      );
      await expectCode(
        engine.schedules.backfill('s', { from: 0, to: Date.now() }),
        'INVALID_OPTIONS',
        'more than 1000 ticks',
      );
      for (const call of [
        () => engine.schedules.get('ghost'),
        () => engine.schedules.describe('ghost'),
        () => engine.schedules.pause('ghost'),
        () => engine.schedules.resume('ghost'),
        () => engine.schedules.trigger('ghost'),
        () => engine.schedules.delete('ghost'),
        () => engine.schedules.update('ghost', { priority: 1 }),
        () => engine.schedules.backfill('ghost', { from: 0, to: 1 }),
      ]) {
        await expectCode(call(), 'SCHEDULE_NOT_FOUND', 'schedule ghost does not exist');
      }
      expect((await engine.schedules.get('s')).version).toBe(1); // refused changes changed nothing
    });

    it('refuses at the door a schedule id the database cannot store and backfill times out of range, naming them', async () => {
      const engine = await target.engine();
      await engine.schedules.create({ id: 's', everyMs: '1m', workflow: report, input: { region: 'eu' } });
      const nul = 'bad\u0000id';
      for (const call of [
        () => engine.schedules.get(nul),
        () => engine.schedules.describe(nul),
        () => engine.schedules.pause(nul),
        () => engine.schedules.resume(nul),
        () => engine.schedules.trigger(nul),
        () => engine.schedules.delete(nul),
        () => engine.schedules.update(nul, { priority: 1 }),
        () => engine.schedules.backfill(nul, { from: 0, to: 1 }),
        () => engine.schedules.create({ id: nul, everyMs: '1m', workflow: report, input: { region: 'eu' } }),
        () => engine.schedules.upsert({ id: nul, everyMs: '1m', workflow: report, input: { region: 'eu' } }),
        () => engine.schedules.get(42 as unknown as string),
      ]) {
        await expectCode(call(), 'INVALID_OPTIONS', 'id:');
      }
      const now = await dbNowMs(engine);
      for (const [range, path] of [
        [{ from: new Date(-8.64e15), to: new Date(now) }, 'from'],
        [{ from: -8.64e15, to: now }, 'from'],
        [{ from: -1e300, to: now }, 'from'],
        [{ from: '-271821-04-20T00:00:00.000Z', to: now }, 'from'],
        [{ from: now, to: new Date(8.64e15) }, 'to'],
        [{ from: now, to: Number.POSITIVE_INFINITY }, 'to'],
        [{ from: new Date(Number.NaN), to: now }, 'from'],
      ] as const) {
        await expectCode(engine.schedules.backfill('s', range), 'INVALID_OPTIONS', `${path}:`);
      }
      expect(await scheduleRuns(engine, 's')).toEqual([]);
    });

    it('fires exactly one run per tick, none before its tick by the database clock', async () => {
      const engine = await target.engine();
      const s = await engine.schedules.create({
        id: 'minutely',
        cron: '* * * * *',
        workflow: report,
        input: { region: 'eu' },
        overlap: 'allow-all', // nothing runs the runs here: the first stays pending
      });
      const first = s.nextTickAt.getTime();
      await moveClockTo(engine, first, -1_000); // a second before the tick: nothing is due
      expect(await engine.schedules.evaluate()).toMatchObject({ evaluated: 0, runsCreated: 0 });
      expect(await scheduleRuns(engine)).toEqual([]);

      await moveClockTo(engine, first, 1_500);
      expect(await engine.schedules.evaluate()).toMatchObject({ evaluated: 1, applied: 1, runsCreated: 1 });
      expect(await engine.schedules.evaluate()).toMatchObject({ evaluated: 0, runsCreated: 0 });
      await advanceClock(engine, MINUTE_MS);
      await engine.schedules.evaluate();
      const runs = await scheduleRuns(engine);
      expect(runs.map((r) => r.tick_ms)).toEqual([first, first + MINUTE_MS]);
      for (const r of runs) expect(r.created_ms).toBeGreaterThanOrEqual(r.tick_ms);

      const handle = engine.client.getHandle(runs[0]?.id ?? '');
      const described = await handle.describe();
      expect(described.run).toMatchObject({
        scheduleId: 'minutely',
        scheduleTickAt: new Date(first),
        name: 'report',
        input: { region: 'eu' },
      });
      expect(described.events.find((e) => e.type === 'run:started')?.data).toMatchObject({
        schedule: 'minutely',
        tick: new Date(first).toISOString(),
      });
      const after = await engine.schedules.get('minutely');
      expect(after).toMatchObject({ lastRunId: runs[1]?.id, skippedTicks: 0 });
      expect(after.nextTickAt.getTime()).toBe(first + 2 * MINUTE_MS);
      expect((await engine.schedules.describe('minutely')).recentRuns.map((r) => r.id)).toEqual(
        [...runs].reverse().map((r) => r.id),
      );
    });

    it('an evaluator that fires from a stale read applies nothing: the compare-and-set refuses it', async () => {
      const engine = await target.engine();
      const s = await engine.schedules.create({
        id: 'stale',
        everyMs: '1m',
        workflow: report,
        input: { region: 'eu' },
        overlap: 'allow-all',
        catchup: { all: { windowMs: '1h' } },
      });
      const first = s.nextTickAt.getTime();
      await moveClockTo(engine, first, 1_000);
      const stalled = deferred();
      const release = deferred();
      setFaultHook('schedules:before-fire', async () => {
        stalled.resolve();
        await release.promise;
      });
      onTestFinished(() => setFaultHook('schedules:before-fire', undefined));
      const stale = engine.schedules.evaluate(); // reads version 1 with tick `first` due, then stalls
      await stalled.promise;
      setFaultHook('schedules:before-fire', undefined);
      expect(await engine.schedules.evaluate()).toMatchObject({ applied: 1, runsCreated: 1 });
      release.resolve();
      expect(await stale).toMatchObject({ evaluated: 1, applied: 0, runsCreated: 0 });
      const after = await engine.schedules.get('stale');
      expect(after.version).toBe(s.version + 1); // moved once, by the evaluation that read it last
      expect(after.nextTickAt.getTime()).toBe(first + MINUTE_MS);
      expect((await scheduleRuns(engine)).map((r) => r.tick_ms)).toEqual([first]);
    });

    it('a firing statement that fails fires nothing; the next evaluation fires the tick once', async () => {
      const engine = await target.engine();
      const s = await engine.schedules.create({
        id: 'fragile',
        everyMs: '1m',
        workflow: report,
        input: { region: 'eu' },
      });
      // A real failure inside the statement: the database refuses the insert of a scheduled run, once armed.
      const q = `"${engine.schema}"`;
      for (const ddl of [
        `CREATE TABLE ${q}.refuse (armed boolean NOT NULL)`,
        `INSERT INTO ${q}.refuse VALUES (true)`,
        `CREATE FUNCTION ${q}.refuse_run() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF (SELECT armed FROM ${q}.refuse) THEN RAISE EXCEPTION 'refused by the test'; END IF;
             RETURN NEW;
           END $$`,
        `CREATE TRIGGER refuse_run BEFORE INSERT ON ${q}.runs
           FOR EACH ROW WHEN (NEW.schedule_id IS NOT NULL) EXECUTE FUNCTION ${q}.refuse_run()`,
      ]) {
        await engine.database.rows(sql.raw(ddl));
      }
      await moveClockTo(engine, s.nextTickAt.getTime(), 1_000);
      await expect(engine.schedules.evaluate()).rejects.toThrow(/refused by the test/);
      const untouched = await engine.schedules.get('fragile');
      expect(untouched).toMatchObject({ version: s.version, nextTickAt: s.nextTickAt, lastRunId: null });
      expect(await scheduleRuns(engine)).toEqual([]);

      await engine.database.rows(sql.raw(`UPDATE ${q}.refuse SET armed = false`));
      expect(await engine.schedules.evaluate()).toMatchObject({ applied: 1, runsCreated: 1 });
      expect(await engine.schedules.evaluate()).toMatchObject({ evaluated: 0, runsCreated: 0 });
      expect((await scheduleRuns(engine)).map((r) => r.tick_ms)).toEqual([s.nextTickAt.getTime()]);
    });

    it('a stored schedule whose ticks cannot be computed is refused alone; the others fire', async () => {
      const engine = await target.engine();
      await alignToMinute(engine);
      const common = { cron: '* * * * *', workflow: report, input: { region: 'eu' } } as const;
      const good = await engine.schedules.create({ ...common, id: 'good' });
      await engine.schedules.create({ ...common, id: 'broken' });
      // A row croner refuses (as one written by another version could be): evaluations must not stop on it.
      await engine.database.rows(
        sql`UPDATE ${engine.names.schedules} SET cron = 'not a cron' WHERE id = 'broken'`,
      );
      await moveClockTo(engine, good.nextTickAt.getTime(), 1_000);
      const done = await engine.schedules.evaluate();
      expect(done).toMatchObject({ evaluated: 2, applied: 1, runsCreated: 1 });
      expect(done.refused.map((r) => r.id)).toEqual(['broken']);
      expect((await scheduleRuns(engine)).map((r) => r.schedule_id)).toEqual(['good']);
    });

    it('F05: after 3 h of downtime a minutely cron follows its catch-up policy without enumerating', async () => {
      const engine = await target.engine();
      await alignToMinute(engine);
      const common = {
        cron: '* * * * *',
        workflow: report,
        input: { region: 'eu' },
        overlap: 'allow-all',
      } as const;
      await engine.schedules.create({ ...common, id: 'none', catchup: 'none' });
      await engine.schedules.create({ ...common, id: 'latest', catchup: 'latest' });
      await engine.schedules.create({ ...common, id: 'window', catchup: { all: { windowMs: '10m' } } });
      const huge = await engine.schedules.create({
        ...common,
        id: 'huge',
        catchup: { all: { windowMs: '1d' } },
      });
      const first = huge.nextTickAt.getTime();

      await moveClockTo(engine, first, 3 * HOUR_MS + 30_000); // 3 h and a half minute after the first tick
      const latestTick = first + 3 * HOUR_MS;
      const done = await engine.schedules.evaluate();
      expect(done).toMatchObject({ evaluated: 4, applied: 4 });
      const count = async (id: string) => (await scheduleRuns(engine, id)).map((r) => r.tick_ms);
      expect(await count('none')).toEqual([]);
      expect(await count('latest')).toEqual([latestTick]);
      expect(await count('window')).toEqual(
        Array.from({ length: 10 }, (_, k) => latestTick - (9 - k) * MINUTE_MS),
      );
      // `all` over a window of 181 missed ticks fires at most 100 per evaluation, oldest first, and goes on.
      expect(await count('huge')).toEqual(Array.from({ length: 100 }, (_, k) => first + k * MINUTE_MS));
      expect((await engine.schedules.get('huge')).nextTickAt.getTime()).toBe(first + 100 * MINUTE_MS);
      for (const id of ['none', 'latest', 'window']) {
        expect((await engine.schedules.get(id)).nextTickAt.getTime()).toBe(latestTick + MINUTE_MS);
      }
      await engine.schedules.evaluate();
      expect(await count('huge')).toHaveLength(181);

      // The next regular tick fires for every policy, and the ticks go on.
      for (let k = 1; k <= 2; k++) {
        await advanceClock(engine, MINUTE_MS);
        await engine.schedules.evaluate();
        expect((await count('none')).at(-1)).toBe(latestTick + k * MINUTE_MS);
        expect(await count('none')).toHaveLength(k);
        expect(await count('latest')).toHaveLength(1 + k);
        expect(await count('window')).toHaveLength(10 + k);
        expect(await count('huge')).toHaveLength(181 + k);
      }
    });

    it('pausing for 2 days and resuming fires at the next tick with no backlog', async () => {
      const engine = await target.engine();
      const s = await engine.schedules.create({
        id: 'hourly',
        cron: '0 * * * *',
        workflow: report,
        input: { region: 'eu' },
        catchup: { all: { windowMs: '7d' } },
      });
      await engine.schedules.pause('hourly');
      await moveClockTo(engine, s.nextTickAt.getTime(), 2 * DAY_MS + 10 * MINUTE_MS);
      expect(await engine.schedules.evaluate()).toMatchObject({ evaluated: 0 });
      const resumed = await engine.schedules.resume('hourly');
      const now = await dbNowMs(engine);
      expect(resumed.nextTickAt.getTime()).toBeGreaterThan(now);
      expect(resumed.nextTickAt.getTime() - now).toBeLessThanOrEqual(HOUR_MS);
      expect(await engine.schedules.evaluate()).toMatchObject({ runsCreated: 0 });
      await moveClockTo(engine, resumed.nextTickAt.getTime(), 1_000);
      expect(await engine.schedules.evaluate()).toMatchObject({ runsCreated: 1 });
      expect((await scheduleRuns(engine)).map((r) => r.tick_ms)).toEqual([resumed.nextTickAt.getTime()]);
    });

    it('trigger starts a run now; backfill starts one run per past tick that has none', async () => {
      const engine = await target.engine();
      const s = await engine.schedules.create({
        id: 'five',
        everyMs: '5m',
        workflow: report,
        input: { region: 'eu' },
        paused: true,
      });
      const runId = await engine.schedules.trigger('five');
      const [triggered] = await scheduleRuns(engine, 'five');
      expect(triggered?.id).toBe(runId);
      expect((await engine.schedules.get('five')).nextTickAt).toEqual(s.nextTickAt); // regular ticks unchanged

      const first = s.nextTickAt.getTime();
      await moveClockTo(engine, first, 20 * MINUTE_MS);
      const filled = await engine.schedules.backfill('five', {
        from: new Date(first),
        to: new Date(first + 15 * MINUTE_MS).toISOString(),
      });
      expect(filled).toMatchObject({ ticks: 4, alreadyFired: 0 });
      expect(filled.runIds).toHaveLength(4);
      const again = await engine.schedules.backfill('five', {
        from: first - 5 * MINUTE_MS,
        to: first + 20 * MINUTE_MS,
      });
      expect(again).toMatchObject({ ticks: 6, alreadyFired: 4 });
      const ticks = (await scheduleRuns(engine, 'five'))
        .map((r) => r.tick_ms)
        .filter((t) => t % 300_000 === 0);
      expect(ticks).toEqual([0, 1, 2, 3, 4, 5].map((k) => first + (k - 1) * 5 * MINUTE_MS));
    });

    it('a create at every application start keeps a schedule an operator paused; one deleted and created again starts afresh', async () => {
      const engine = await target.engine();
      const options = { id: 'app', everyMs: '5m', workflow: report, input: { region: 'eu' } } as const;
      const created = await engine.schedules.create(options);
      await engine.schedules.pause('app');
      // The next start of the application: the same options, paused state not given — the pause stands.
      const again = await engine.schedules.create(options);
      expect(again.paused).toBe(true);
      expect(again.version).toBe(created.version + 1);
      await expectCode(
        engine.schedules.create({ ...options, paused: false }),
        'SCHEDULE_EXISTS',
        'other options or paused state',
      );

      const first = created.nextTickAt.getTime();
      await engine.schedules.resume('app');
      await moveClockTo(engine, first, 11 * MINUTE_MS);
      const old = await engine.schedules.backfill('app', { from: first, to: first + 5 * MINUTE_MS });
      expect(old).toMatchObject({ ticks: 2, alreadyFired: 0 });
      await engine.schedules.delete('app');
      const fresh = await engine.schedules.create(options);
      // The old runs are kept (they still say which schedule and tick made them) but no longer hold its ticks.
      expect(await scheduleRuns(engine, 'app')).toEqual([]);
      expect(
        await engine.schedules.backfill('app', { from: first, to: first + 5 * MINUTE_MS }),
      ).toMatchObject({
        ticks: 2,
        alreadyFired: 0,
      });
      expect(fresh.createdAt.getTime()).toBeGreaterThanOrEqual(created.createdAt.getTime());
      const started = await engine.database.rows<{ n: number }>(sql`
        SELECT count(*)::int AS n FROM ${engine.names.events}
         WHERE type = 'run:started' AND data->>'schedule' = 'app'`);
      expect(started[0]?.n).toBe(4);
    });

    it("a schedule's activity runs keep the activity's rate limit, fired by an evaluation, a trigger or a backfill", async () => {
      const engine = await target.engine();
      const limited = pureActivity('limited', z.object({ n: z.number() }), z.number(), ({ n }) => n, {
        rateLimit: { limit: 1, periodMs: '1h' },
      });
      const s = await engine.schedules.create({
        id: 'limited',
        everyMs: '1m',
        activity: limited,
        input: { n: 1 },
        overlap: 'allow-all',
      });
      const first = s.nextTickAt.getTime();
      await moveClockTo(engine, first, MINUTE_MS + 1_000);
      expect(await engine.schedules.evaluate()).toMatchObject({ runsCreated: 1 }); // the latest tick
      await engine.schedules.pause('limited'); // no more ticks from here: the worker below fires none
      await engine.schedules.backfill('limited', { from: first, to: first }); // a second run
      await engine.schedules.trigger('limited'); // a third
      const runs = await scheduleRuns(engine, 'limited');
      expect(runs).toHaveLength(3);
      const worker = await startWorker(engine, [limited], { concurrency: 5, pollIntervalMs: 50 });
      const completed = async () =>
        (await scheduleRuns(engine, 'limited')).filter((r) => r.status === 'completed').length;
      // One start per hour of database time: each hour moved forward lets exactly one more run start.
      for (let k = 1; k <= 3; k++) {
        await checkOnEvents([worker], async () => (await completed()) === k, `scheduled run ${k} of 3`);
        await advanceClock(engine, HOUR_MS);
      }
      await worker.stop();
      const times = await claimTimesMs(engine, 'limited', '');
      expect(times).toHaveLength(3);
      expect(maxInWindow(times, HOUR_MS)).toBe(1);
    });

    it("a create at every start after the activity's retry policy, lease or timeout changed is no conflict; its runs take the new ones", async () => {
      const engine = await target.engine();
      const version = (maximumAttempts: number, leaseMs: number) =>
        defineActivity({
          name: 'export',
          input: z.object({ to: z.string() }),
          output: z.null(),
          retry: { maximumAttempts },
          leaseMs,
          startToCloseTimeoutMs: leaseMs * 10,
          run: () => Promise.resolve(null),
        });
      const options = {
        id: 'export',
        everyMs: '1h',
        input: { to: 's3' },
        overlap: 'allow-all',
        paused: true,
      } as const;
      const created = await engine.schedules.create({ ...options, activity: version(3, 30_000) });
      // The next deploy changed the activity: the same create at start returns the schedule.
      const again = await engine.schedules.create({ ...options, activity: version(5, 60_000) });
      expect(again.id).toBe(created.id);
      const runId = await engine.schedules.trigger('export'); // a process without the definition fires it
      const [step] = await stepsOf(engine, runId);
      expect(step).toMatchObject({ lease_ms: 60_000, start_to_close_timeout_ms: 600_000 });
      expect(step?.retry_policy).toMatchObject({ maximumAttempts: 5 });

      // A worker that serves the activity fires with its own definition, whatever the schedule stored.
      const current = version(7, 45_000);
      const worker = await startWorker(engine, [current], { pollIntervalMs: 50 });
      const s = await engine.schedules.resume('export');
      await moveClockTo(engine, s.nextTickAt.getTime(), 1_000);
      await checkOnEvents(
        [worker],
        async () =>
          (await scheduleRuns(engine, 'export')).filter((r) => r.status === 'completed').length === 2,
        'the tick the worker fired, completed',
      );
      await worker.stop();
      const fired = (await scheduleRuns(engine, 'export')).find((r) => r.id !== runId);
      const [firedStep] = await stepsOf(engine, fired?.id ?? '');
      expect(firedStep).toMatchObject({ lease_ms: 45_000, start_to_close_timeout_ms: 450_000 });
      expect(firedStep?.retry_policy).toMatchObject({ maximumAttempts: 7 });
    });

    it("upsert creates a schedule or brings it to new options, keeping its fired ticks and an operator's pause", async () => {
      const engine = await target.engine();
      const options = { id: 'digest', everyMs: '5m', workflow: report, input: { region: 'eu' } } as const;
      const created = await engine.schedules.upsert(options);
      expect(created).toMatchObject({ id: 'digest', spec: { everyMs: 300_000 }, paused: false, version: 1 });
      expect(await engine.schedules.upsert(options)).toEqual(created); // the same options change nothing

      await moveClockTo(engine, created.nextTickAt.getTime(), 1_000);
      expect(await engine.schedules.evaluate()).toMatchObject({ runsCreated: 1 });
      const fired = await engine.schedules.pause('digest');
      expect(fired.lastRunId).not.toBeNull();

      // The next deploy: another interval, input and overlap policy. No SCHEDULE_EXISTS, the pause stands.
      const changed = await engine.schedules.upsert({
        ...options,
        everyMs: '10m',
        input: { region: 'us' },
        overlap: 'allow-all',
      });
      expect(changed).toMatchObject({
        spec: { everyMs: 600_000 },
        input: { region: 'us' },
        overlap: 'allow-all',
        paused: true,
        lastTickAt: fired.lastTickAt,
        lastRunId: fired.lastRunId,
        skippedTicks: fired.skippedTicks,
        version: fired.version + 1,
      });
      expect(changed.nextTickAt.getTime() % 600_000).toBe(0);
      expect(changed.nextTickAt.getTime()).toBeGreaterThan(await dbNowMs(engine));
      await expectCode(
        engine.schedules.create({ ...options, everyMs: '10m' }),
        'SCHEDULE_EXISTS',
        'use upsert',
      );
      // paused given: the call says which.
      expect(
        await engine.schedules.upsert({
          ...options,
          everyMs: '10m',
          input: { region: 'us' },
          overlap: 'allow-all',
          paused: false,
        }),
      ).toMatchObject({ paused: false });
      await expectCode(
        engine.schedules.upsert({ ...options, everyMs: 10 }),
        'INVALID_OPTIONS',
        'everyMs: must be ≥ 1 s',
      );
      expect(await scheduleRuns(engine, 'digest')).toHaveLength(1);
    });

    describe('overlap policies, while the previous run is still pending', () => {
      /** A schedule of `sync` (served by nobody: its runs stay live), and a clock moved tick by tick. */
      async function overlapping(overlap: 'skip' | 'buffer-one' | 'allow-all' | 'cancel-previous') {
        const engine = await target.engine();
        const s = await engine.schedules.create({
          id: overlap,
          everyMs: '1m',
          activity: sync,
          input: { table: 't' },
          overlap,
          catchup: 'latest',
        });
        const first = s.nextTickAt.getTime();
        await moveClockTo(engine, first, 1_000);
        const tick = async () => {
          await engine.schedules.evaluate();
          await advanceClock(engine, MINUTE_MS);
        };
        return { engine, first, tick, runs: () => scheduleRuns(engine, overlap) };
      }

      it('skip: a tick while the last run is live starts nothing, and is counted', async () => {
        const { engine, first, tick, runs } = await overlapping('skip');
        await tick();
        await tick();
        const [a] = await runs();
        expect((await runs()).map((r) => r.tick_ms)).toEqual([first]);
        expect((await engine.schedules.get('skip')).skippedTicks).toBe(1);
        await engine.client.getHandle(a?.id ?? '').cancel('done with it');
        await tick();
        expect((await runs()).map((r) => r.tick_ms)).toEqual([first, first + 2 * MINUTE_MS]);
      });

      it('buffer-one: one tick waits for the last run to end and then starts; later ones are skipped', async () => {
        const { engine, first, tick, runs } = await overlapping('buffer-one');
        await tick();
        await tick();
        await tick();
        expect((await runs()).map((r) => r.tick_ms)).toEqual([first]);
        const waiting = await engine.schedules.get('buffer-one');
        expect(waiting).toMatchObject({ bufferedTickAt: new Date(first + MINUTE_MS), skippedTicks: 1 });
        await engine.client.getHandle((await runs())[0]?.id ?? '').cancel('ended');
        // The buffered tick starts now that the last run ended; the tick due now waits behind its run in turn.
        expect(await engine.schedules.evaluate()).toMatchObject({ runsCreated: 1 });
        expect((await runs()).map((r) => r.tick_ms)).toEqual([first, first + MINUTE_MS]);
        expect((await engine.schedules.get('buffer-one')).bufferedTickAt).toEqual(
          new Date(first + 3 * MINUTE_MS),
        );
        // With no tick due, an evaluation still notices the run ended and releases the buffered tick.
        await engine.client.getHandle((await runs())[1]?.id ?? '').cancel('ended');
        expect(await engine.schedules.evaluate()).toMatchObject({ runsCreated: 1 });
        expect((await runs()).map((r) => r.tick_ms)).toEqual([
          first,
          first + MINUTE_MS,
          first + 3 * MINUTE_MS,
        ]);
        expect((await engine.schedules.get('buffer-one')).bufferedTickAt).toBeNull();
      });

      it('allow-all: every tick starts a run', async () => {
        const { tick, runs, first } = await overlapping('allow-all');
        await tick();
        await tick();
        expect((await runs()).map((r) => [r.tick_ms, r.status])).toEqual([
          [first, 'pending'],
          [first + MINUTE_MS, 'pending'],
        ]);
      });

      it('cancel-previous: a tick cancels the live run and starts its own', async () => {
        const { tick, runs, first } = await overlapping('cancel-previous');
        await tick();
        await tick();
        expect((await runs()).map((r) => [r.tick_ms, r.status])).toEqual([
          [first, 'cancelled'],
          [first + MINUTE_MS, 'pending'],
        ]);
      });
    });

    it('workers fire due ticks by themselves, and the runs complete', async () => {
      const engine = await target.engine();
      const worker = await startWorker(engine, [report], { pollIntervalMs: 100 });
      const s = await engine.schedules.create({
        id: 'fast',
        everyMs: '1m',
        workflow: report,
        input: { region: 'eu' },
      });
      // Time travel, not waiting: the worker polls every 100 ms and judges due times by the database clock.
      for (let k = 0; k < 2; k++) {
        await moveClockTo(engine, s.nextTickAt.getTime() + k * MINUTE_MS, 500);
        await checkOnEvents(
          [worker],
          async () => (await scheduleRuns(engine, 'fast')).filter((r) => r.status === 'completed').length > k,
          `completed scheduled run ${k + 1}`,
        );
      }
      const runs = await scheduleRuns(engine, 'fast');
      expect(runs.map((r) => r.tick_ms)).toEqual([0, 1].map((k) => s.nextTickAt.getTime() + k * MINUTE_MS));
      for (const r of runs) expect(r.created_ms).toBeGreaterThanOrEqual(r.tick_ms);
    });

    it('a worker with schedules: false fires no due tick; one without it does', async () => {
      const engine = await target.engine();
      const s = await engine.schedules.create({
        id: 'due',
        everyMs: '1m',
        workflow: report,
        input: { region: 'eu' },
      });
      await moveClockTo(engine, s.nextTickAt.getTime(), 1_000);
      const off = workerFor(engine, [report], { schedules: false });
      const evaluations: unknown[] = [];
      off.events.on('schedules:evaluated', (e) => evaluations.push(e));
      await off.start();
      // A worker that evaluates schedules does so as it starts, and its stop waits for that evaluation to end:
      // had this one evaluated, the due tick's run would exist now.
      await off.stop();
      expect(evaluations).toEqual([]);
      expect(await scheduleRuns(engine, 'due')).toEqual([]);

      const on = workerFor(engine, [report]);
      const evaluated = workerEvent(on, 'schedules:evaluated');
      await on.start();
      expect(await evaluated).toMatchObject({ evaluated: 1, runsCreated: 1 });
      await on.stop();
      expect((await scheduleRuns(engine, 'due')).map((r) => r.tick_ms)).toEqual([s.nextTickAt.getTime()]);
    });
  });
}

describe('schedules evaluated by several engines at once (postgres)', () => {
  const target = useEngineTarget('postgres');

  it('makes exactly one run per (schedule, tick) and moves each schedule once per tick', async () => {
    const first = await target.engine();
    const engines = [
      first,
      ...(await Promise.all([1, 2, 3].map(() => target.engine({ schema: first.schema })))),
    ];
    const ids = Array.from({ length: 40 }, (_, k) => `s${k}`);
    await alignToMinute(first);
    for (const id of ids) {
      await first.schedules.create({
        id,
        everyMs: '1m',
        workflow: report,
        input: { region: id },
        overlap: 'allow-all',
        catchup: { all: { windowMs: '1h' } },
      });
    }
    const start = (await first.schedules.get('s0')).nextTickAt.getTime();
    for (let minute = 0; minute < 5; minute++) {
      await moveClockTo(first, start + minute * MINUTE_MS, 2_000);
      // Every engine evaluates twice, all at once: they race for the same rows.
      const done = await Promise.all(
        engines.flatMap((e) => [e.schedules.evaluate(), e.schedules.evaluate()]),
      );
      expect(done.reduce((sum, d) => sum + d.runsCreated, 0)).toBe(ids.length);
    }
    const runs = await scheduleRuns(first);
    expect(runs).toHaveLength(ids.length * 5);
    const keys = new Set(runs.map((r) => `${r.schedule_id}@${r.tick_ms}`));
    expect(keys.size).toBe(runs.length);
    for (const r of runs) expect(r.created_ms).toBeGreaterThanOrEqual(r.tick_ms);
    for (const id of ids) {
      expect((await scheduleRuns(first, id)).map((r) => r.tick_ms)).toEqual(
        [0, 1, 2, 3, 4].map((k) => start + k * MINUTE_MS),
      );
    }
  });
});
