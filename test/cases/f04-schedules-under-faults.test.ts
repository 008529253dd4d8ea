/**
 * F04 — clock skew between nodes: duplicate or skipped cron ticks, early ticks (shared/cases/FAILURE-CASES.md).
 *
 * Three worker processes evaluate one every-second schedule (every worker does by default) while their process
 * clocks are +90 s, −90 s and 0 and each is hurt in turn: one is frozen (SIGSTOP … SIGCONT) — possibly between
 * reading a due tick and firing it —, one is SIGKILLed after a replacement with the same worker id has started,
 * and one is cut off from the database mid-tick: the proxy in front of it lets the firing statement through and
 * drops its reply (the statement's outcome unknown to the worker), then blackholes it for a while. Expected:
 * exactly one run per tick (no tick lost, none twice), none created before its tick by the database clock.
 *
 * Time is compressed: the test moves the database clock one tick forward at a time (time travel) and waits for
 * that tick's run, so 60 ticks take seconds, not a minute; the schedule's catch-up is `all` (window 1 h), so a
 * tick due while no live evaluator could fire it still fires — once — when one can.
 *
 * The timer half of the case runs beside it on the same skewed, hurt workers: 20 runs of `steps-with-sleep`
 * (step A, a 30 s durable sleep, step B) started before the first tick. Expected: every run completes (the
 * killed worker's leases are reclaimed), B completes once per run, and no continuation after the sleep starts
 * before the timer's due time by the database clock.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow } from '@palisade/sdk';
import { advanceClock } from '@palisade/engine/testing';
import { fixtureActivities, fixtureWorkflows } from '../fixtures/activities.js';
import type { WorkerProcessConfig } from '../fixtures/worker-protocol.js';
import { useEngineTarget } from '../support/engine.js';
import { useFaultCase, type FaultCase } from '../support/fault-case.js';
import { useWorkerProcesses } from '../support/worker-process.js';
import { pollUntil } from '../support/wait.js';

const TICKS = 60;
const POLL_MS = 100;
const SCHEDULE_ID = 'f04-every-second';
const SLEEPERS = 20;
const SLEEP_MS = 30_000;
const { stepsWithSleep } = fixtureWorkflows(fixtureActivities({ leaseMs: 5_000 }));

/** Nobody serves it here: its runs stay pending, which is all this case needs. */
const heartbeatReport = defineWorkflow({
  name: 'heartbeat-report',
  input: z.object({}),
  output: z.null(),
  run: () => Promise.resolve(null),
});

interface TickRun {
  tick_ms: number;
  created_ms: number;
}

async function tickRuns(c: FaultCase): Promise<TickRun[]> {
  return c.engine.database.rows<TickRun>(sql`
    SELECT round(extract(epoch FROM schedule_tick_at) * 1000)::float8 AS tick_ms,
           round(extract(epoch FROM created_at) * 1000)::float8 AS created_ms
      FROM ${c.engine.names.runs} WHERE schedule_id = ${SCHEDULE_ID} ORDER BY schedule_tick_at, id`);
}

async function dbNowMs(c: FaultCase): Promise<number> {
  const rows = await c.engine.database.rows<{ ms: number }>(
    sql`SELECT (extract(epoch FROM ${c.engine.names.now}) * 1000)::float8 AS ms`,
  );
  return Number(rows[0]?.ms);
}

describe('F04: schedules under faults and skewed clocks', () => {
  const target = useEngineTarget('postgres');
  const workers = useWorkerProcesses();
  const faults = useFaultCase(target);

  it(
    'fires exactly one run per tick, none before its tick, and continues no sleep before its due time, by database time',
    { timeout: 90_000 },
    async () => {
      const c = await faults.setUp();
      const proxy = await faults.proxy();
      const config = (
        workerId: string,
        databaseUrl = c.databaseUrl,
        deferStart = false,
      ): WorkerProcessConfig => ({
        databaseUrl,
        schema: c.schema,
        workerId,
        timings: { leaseMs: 5_000 },
        pollIntervalMs: POLL_MS,
        deferStart,
      });
      const [fast, slow, replacement, cut] = await Promise.all([
        workers.spawn(config('fast'), { clock: { offsetMs: 90_000 } }),
        workers.spawn(config('slow'), { clock: { offsetMs: -90_000 } }),
        // The killed worker's successor: same worker id, ready ahead, started when the case says so.
        workers.spawn(config('slow', c.databaseUrl, true), { clock: { offsetMs: -90_000 } }),
        workers.spawn(config('cut', proxy.url(c.databaseUrl))),
      ]);

      const schedule = await c.engine.schedules.create({
        id: SCHEDULE_ID,
        everyMs: '1s',
        workflow: heartbeatReport,
        input: {},
        overlap: 'allow-all',
        catchup: { all: { windowMs: '1h' } },
      });
      const sleepers = await c.engine.client.startMany(
        stepsWithSleep,
        Array.from({ length: SLEEPERS }, () => ({ sleepMs: SLEEP_MS, after: ['B'] })),
      );
      const first = schedule.nextTickAt.getTime();
      const last = first + (TICKS - 1) * 1_000;
      let dropRule: ReturnType<typeof proxy.dropReplyAfter> | undefined;
      let cutMidTick = false;

      for (let k = 0; k < TICKS; k++) {
        const tick = first + k * 1_000;
        // Faults, each while the others keep evaluating.
        if (k === 10) fast.kill('SIGSTOP');
        if (k === 20) fast.kill('SIGCONT');
        if (k === 25) {
          await replacement.start();
          slow.kill('SIGKILL');
        }
        // The firing statement carries the schedule id in its parameter: its reply is dropped, the worker waits.
        if (k === 32) dropRule = proxy.dropReplyAfter(`"id":"${SCHEDULE_ID}"`);
        if (dropRule && !cutMidTick && dropRule.trippedCount() > 0) {
          cutMidTick = true;
          proxy.blackhole();
        }
        if (k === 50) {
          proxy.restore();
          proxy.reset(); // the connection whose reply was dropped errs; the worker evaluates again on a new one
        }
        await advanceClock(c.engine, tick + 200 - (await dbNowMs(c)));
        await pollUntil(
          () => tickRuns(c),
          (runs) => runs.some((r) => r.tick_ms === tick),
          { timeoutMs: 15_000, what: `the run of tick ${k}` },
        );
      }
      expect(cutMidTick, 'the cut-off worker sent a firing statement whose reply was dropped').toBe(true);

      const runs = (await tickRuns(c)).filter((r) => r.tick_ms <= last);
      expect(runs.map((r) => r.tick_ms)).toEqual(Array.from({ length: TICKS }, (_, k) => first + k * 1_000));
      for (const r of runs) expect(r.created_ms).toBeGreaterThanOrEqual(r.tick_ms);
      // No run at all for a tick off the schedule's grid, or twice for any tick (the whole history so far).
      const all = await tickRuns(c);
      expect(new Set(all.map((r) => r.tick_ms)).size).toBe(all.length);
      for (const r of all) expect(r.tick_ms % 1_000).toBe(0);
      // The sleepers: each completed, its B ran once, and no B was scheduled (by the turn after the sleep)
      // before the sleep's due time by the database clock.
      await Promise.all(sleepers.map((h) => h.result({ timeoutMs: 30_000 })));
      // The timer's due time is in its timer:started event (a fired timer's row keeps none).
      const continued = await c.engine.database.rows<{ run_id: string; due_ms: number; b_ms: number }>(sql`
        SELECT t.run_id::text,
               (extract(epoch FROM (e.data->>'dueAt')::timestamptz) * 1000)::float8 AS due_ms,
               (extract(epoch FROM b.created_at) * 1000)::float8 AS b_ms
          FROM ${c.engine.names.steps} t
          JOIN ${c.engine.names.events} e ON e.step_id = t.id AND e.type = 'timer:started'
          JOIN ${c.engine.names.steps} b ON b.run_id = t.run_id AND b.seq = t.seq + 1 AND b.retired_at IS NULL
         WHERE t.kind = 'timer' AND t.retired_at IS NULL
           AND t.run_id IN (SELECT id FROM ${c.engine.names.runs} WHERE name = 'steps-with-sleep')`);
      expect(continued).toHaveLength(SLEEPERS);
      for (const r of continued) expect(r.b_ms, r.run_id).toBeGreaterThanOrEqual(r.due_ms);
      // B completed once per run (an attempt cut off mid-B may have started it again: execution is at least once).
      const [b] = await c.sql<{ completed: number; started_runs: number }[]>`
        SELECT (SELECT count(*)::int FROM ${c.sql(c.schema)}.steps
                 WHERE name = 'record-step' AND seq = 2 AND status = 'completed' AND retired_at IS NULL) AS completed,
               (SELECT count(DISTINCT run_id)::int FROM ${c.sql(c.schema)}.executions WHERE label = 'B') AS started_runs`;
      expect(b).toEqual({ completed: SLEEPERS, started_runs: SLEEPERS });
      for (const w of [fast, replacement, cut])
        expect(w.kill('SIGCONT'), `${w.workerId} is alive`).toBe(true);
    },
  );
});
