/**
 * T26 — the database goes away again and again while every part of a worker is busy (issue 26). Three worker
 * processes serve `chaos-loop` steps (claims, heartbeats, completion batches), `chaos-flow` workflows (turns,
 * eager grants), a schedule that fires every second (schedule evaluation) and a retention sweep every 200 ms;
 * their NOTIFY listeners wake them, and this process waits on results through its own engine's listener. Each
 * iteration terminates every backend of the workers a few times at random moments, then stops the server (a
 * fast shutdown or a crash) for 0.3–2 L and starts it again.
 *
 * What must hold besides the checker's invariants: no worker process exits (an engine in a long-lived service
 * rides out an outage: it logs, reconnects and resumes on its own — before issue 26 a rejection nobody listened
 * to killed the process), every run of the iteration ends, every `handle.result()` waiting across the outage
 * settles with the run's output, and every worker claims again after the last restart.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { withApplicationName } from '../backend-faults.js';
import { defineScenario } from '../define-scenario.js';
import type { WorkerProcess } from '../../support/worker-process.js';

const APPLICATION = 't26-worker';
const SCHEDULE_ID = 't26-every-second';
/** Activity slots of each worker; its prefetch is as many (the default). */
const CONCURRENCY = 3;

export const outageUnderLoad = defineScenario('T26 outage under load', {
  description:
    'backend kills and server restarts while claims, heartbeats, batches, turns, NOTIFY, schedules and retention are busy; every worker lives',
  iterations: { full: 6, ci: 2 },
  async setup(ctx) {
    const workers: WorkerProcess[] = [];
    const exits: string[] = [];
    // A worker's exit fails the scenario at once, with its stderr: waiting for runs it would never end hides why.
    let died!: (reason: Error) => void;
    const death = new Promise<never>((_, reject) => (died = reject));
    death.catch(() => undefined);
    const orDeath = <T>(p: Promise<T>): Promise<T> => Promise.race([p, death]);
    for (let i = 0; i < 3; i++) {
      const w = await ctx.spawnWorker({
        concurrency: CONCURRENCY,
        databaseUrl: withApplicationName(ctx.databaseUrl, `${APPLICATION}-${i + 1}`),
        // Far longer than the scenario (no run of it is pruned), but swept all the time: the sweep's statement
        // is in flight when the server goes away.
        retentionMs: 24 * 3_600_000,
        retentionSweepIntervalMs: 200,
      });
      void w.exited.then((e) => {
        exits.push(
          `${w.workerId} exited (code ${e.code}, signal ${e.signal}) during the scenario:\n${w.stderr().slice(-3_000)}`,
        );
        died(new Error(exits.join('\n')));
      });
      workers.push(w);
    }
    await ctx.engine.schedules.create({
      id: SCHEDULE_ID,
      everyMs: '1s',
      activity: ctx.loop,
      input: { iterations: 2, sleepMs: 20 },
      overlap: 'allow-all',
    });
    return { workers, exits, orDeath, exitsAreFine: () => void (died = () => undefined) };
  },
  proceed: ({ exits }) => exits.length === 0,
  async iteration(ctx, { i, iterations }, { workers, orDeath }) {
    const L = ctx.timings.leaseMs;
    const runIds: string[] = [];
    for (let r = 0; r < 6; r++) runIds.push((await ctx.enqueue({ iterations: 20, sleepMs: 30 })).runId);
    for (let r = 0; r < 3; r++) runIds.push((await ctx.startWorkflow({ steps: 3, iterations: 4 })).runId);
    // Waiters across the outage, on this process's own LISTEN connection.
    const results = runIds.map((id) =>
      ctx.engine.client
        .getHandle(id)
        .result({ timeoutMs: 90_000 })
        .then(
          () => undefined,
          (error: unknown) => `result() of ${id}: ${String(error)}`,
        ),
    );

    const kills = ctx.rng.int(3, 6);
    for (let k = 0; k < kills; k++) {
      await sleep(ctx.rng.int(50, 400));
      const [row] = await ctx.sql<{ n: number }[]>`
          SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
           WHERE starts_with(application_name, ${APPLICATION})`;
      if ((row?.n ?? 0) > 0) ctx.fault('worker backends terminated');
    }

    await sleep(ctx.rng.int(50, 400));
    const mode = i % 2 === 0 ? 'fast' : 'immediate';
    const downAt = Date.now();
    await ctx.server.shutdown(mode);
    ctx.fault(`${mode} restart`);
    await ctx.sleepUntil(downAt + ctx.rng.int(0.3 * L, 2 * L));
    await ctx.server.start();
    const upAt = Date.now();

    for (const id of runIds) {
      const status = await orDeath(ctx.waitForRunEnd(id, 60_000));
      ctx.expect(status === 'completed', `run ${id} ended ${status}, not completed`);
    }
    for (const failure of await orDeath(Promise.all(results))) if (failure) ctx.expect(false, failure);
    // Every worker claims again after the restart. More jobs than any two workers can hold (each takes at most
    // its 3 slots and 3 prefetched), so a worker that claims nothing is one that cannot, not one that lost the
    // races for too little work.
    if (i === iterations - 1) {
      const probes = workers.length * (CONCURRENCY + CONCURRENCY);
      for (let r = 0; r < probes; r++)
        runIds.push((await ctx.enqueue({ iterations: 10, sleepMs: 30 })).runId);
      await Promise.all(
        workers.map((w) =>
          w
            .waitFor('attempt:claimed', (m) => m.wallMs >= upAt, { timeoutMs: 30_000 })
            .catch((error: unknown) =>
              ctx.expect(false, `${w.workerId} claimed nothing after the restart: ${String(error)}`),
            ),
        ),
      );
    }
  },
  async finish(ctx, { exits, exitsAreFine }) {
    // Stopped below (the harness's heal phase), a worker exits: from here on an exit is no failure.
    exitsAreFine();
    // Paused, it fires no more; its runs are read before the delete, which lets go of them (schedule_id null).
    await ctx.engine.schedules.pause(SCHEDULE_ID);
    const fired = await ctx.sql.unsafe<{ id: string }[]>(
      `SELECT id::text FROM "${ctx.schema}".runs WHERE schedule_id = $1`,
      [SCHEDULE_ID],
    );
    await ctx.engine.schedules.delete(SCHEDULE_ID);
    ctx.adoptRuns(fired.map((r) => r.id));
    ctx.expect(fired.length > 0, 'the schedule fired');
    ctx.expect(exits.length === 0, `every worker process lived:\n${exits.join('\n')}`);
  },
});
