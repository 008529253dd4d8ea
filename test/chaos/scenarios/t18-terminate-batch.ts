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
import { COMPLETION_STATEMENT, lockRow, waitingBackend, withApplicationName } from '../backend-faults.js';
import { readGrants } from '../checker.js';
import type { Scenario } from '../harness.js';
import {
  WAVE_CONCURRENCY,
  answersOf,
  enqueueWave,
  expectWaveCompleted,
  expectWholeWave,
  rejectedCompletions,
  releaseBatch,
  waitForBatch,
} from './batch-wave.js';

const APPLICATION_NAME = 'chaos-t18-a';

export const terminateBatch: Scenario = {
  name: 'T18 backend termination mid-batch',
  description:
    'pg_terminate_backend on the session of a batched completion (6 rows) waiting in the database; each retried, applied once',
  iterations: { full: 6, ci: 2 },
  async run(ctx, iterations) {
    const a = await ctx.spawnWorker({
      databaseUrl: withApplicationName(ctx.databaseUrl, APPLICATION_NAME),
      workerId: 'a',
      concurrency: WAVE_CONCURRENCY,
    });
    for (let i = 0; i < iterations; i++) {
      const wave = await enqueueWave(ctx, `t18-${i}`, a, true);
      const held = await waitForBatch(ctx, a, wave, 'held');
      const tokens = expectWholeWave(ctx, wave, held);
      const lock = await lockRow(ctx, 'runs', ctx.rng.pick(wave.runs).runId);
      const from = a.mark();
      try {
        releaseBatch(a, held);
        await waitingBackend(ctx, {
          applicationName: APPLICATION_NAME,
          pattern: COMPLETION_STATEMENT,
          terminate: true,
          timeoutMs: 5_000,
        });
        ctx.fault('terminated: batched completion');
      } catch (error) {
        ctx.expect(false, `${wave.key}: ${(error as Error).message}`);
      } finally {
        await lock.release();
      }
      await expectWaveCompleted(ctx, wave, 'terminated');

      const answers = answersOf(a, tokens.values(), from);
      const rejected = await rejectedCompletions(ctx, tokens.values());
      for (const m of a.messages.slice(from)) {
        if (m.type === 'chaos:batch' && m.phase === 'answered') ctx.sample('retryBatchRows', m.rows.length);
      }
      for (const [stepId, token] of tokens) {
        const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).filter((g) => !g.revoke);
        const got = answers.get(token) ?? [];
        ctx.sample('attemptsPerStep terminated', grants.length);
        ctx.expect(
          grants.length === 1,
          `${wave.key}: step ${stepId} ${grants.length} grants, want 1 (nothing re-run)`,
        );
        ctx.expect(
          got.length === 1 && got[0] === 'applied',
          `${wave.key}: the completion under ${token} was answered ${got.join(', ') || 'never'} after the ` +
            `termination, want applied once (the terminated statement committed nothing)`,
        );
        ctx.expect(!rejected.has(token), `${wave.key}: the completion under ${token} was recorded as stale`);
        const acked = await a
          .waitFor('attempt:completed', (m) => m.attempt.token === token, { timeoutMs: 10_000 })
          .then(() => true)
          .catch(() => false);
        ctx.expect(acked, `${wave.key}: A never saw its completion under ${token} acknowledged`);
      }
    }
    ctx.expect(a.all('process:fatal').length === 0, 'worker A crashed');
  },
};
