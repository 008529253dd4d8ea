/**
 * T18 — backend termination with a batched completion in flight. Worker A gathers a wave of six short runs whose
 * completions go in one statement (./batch-wave.ts), held before it is sent; an admin transaction locks one of
 * the batch's runs, the batch is released, and its statement waits on that lock in the database. The backend
 * carrying it (A's session, found in `pg_stat_activity` by `application_name`) is terminated there: the statement
 * rolls back, and every completion of the batch fails with a connection error at once. Each is retried by its
 * own attempt (idempotent by nonce) and applied once; nothing runs again.
 *
 * Pass: the checker's zeros, every run completed, the held batch held all six rows, one grant per step, each row
 * answered exactly once afterwards (`applied`: the terminated statement committed nothing) and acknowledged by A,
 * no completion recorded as stale, and A never crashed.
 */
import { COMPLETION_STATEMENT, terminateWhileLocked, withApplicationName } from '../backend-faults.js';
import { defineScenario } from '../define-scenario.js';
import { WAVE_CONCURRENCY, expectRetriedOnce, expectWaveCompleted, startHeldWave } from './batch-wave.js';
import { expectAnsweredOnce, expectNoneStale } from './completions.js';

const APPLICATION_NAME = 'chaos-t18-a';

export const terminateBatch = defineScenario('T18 backend termination mid-batch', {
  description:
    'pg_terminate_backend on the session of a batched completion (6 rows) waiting in the database; each retried, applied once',
  iterations: { full: 6, ci: 2 },
  setup: (ctx) =>
    ctx.spawnWorker({
      databaseUrl: withApplicationName(ctx.databaseUrl, APPLICATION_NAME),
      workerId: 'a',
      concurrency: WAVE_CONCURRENCY,
    }),
  async iteration(ctx, { i }, a) {
    const { wave, tokens, release } = await startHeldWave(ctx, `t18-${i}`, a);
    const from = a.mark();
    await terminateWhileLocked(ctx, {
      lock: { table: 'runs', id: ctx.rng.pick(wave.runs).runId },
      backend: { applicationName: APPLICATION_NAME, pattern: COMPLETION_STATEMENT },
      release,
      label: wave.key,
      fault: 'terminated: batched completion',
    });
    await expectWaveCompleted(ctx, wave, 'terminated');

    expectAnsweredOnce(ctx, a, wave.key, tokens.values(), 'applied', {
      after: from,
      since: ' after the termination',
      because: ' (the terminated statement committed nothing)',
    });
    await expectNoneStale(ctx, wave.key, tokens.values());
    await expectRetriedOnce(ctx, a, wave, tokens, { what: 'terminated', from, ack: { timeoutMs: 10_000 } });
  },
  finish(ctx, a) {
    ctx.expect(a.all('process:fatal').length === 0, 'worker A crashed');
  },
});
