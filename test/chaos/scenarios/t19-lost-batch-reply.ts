/**
 * T19 — a lost reply to a batched completion. Worker A reaches PostgreSQL through its own TCP proxy and gathers a
 * wave of six short runs whose completions go in one statement (./batch-wave.ts), held before it is sent. The
 * proxy is told to drop the server's reply on the connection that carries one of the wave's tags (each run's
 * output carries its tag, so the statement's parameters do); the batch is released, the statement runs and
 * commits every row, its reply never arrives, and the connection is then destroyed, as a network failure after
 * the commit would. Every completion of the batch fails with a connection error; each is retried by its own
 * attempt, and the retry must find its own committed completion: answered `replayed`, never a second outcome.
 *
 * Pass: the checker's zeros (one terminal outcome per step), every run completed, the held batch held all six
 * rows, one grant per step, each row answered only `replayed` (the dropped statement's answer never reached A),
 * each completion acknowledged by A, and none recorded as stale.
 */
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

export const lostBatchReply: Scenario = {
  name: 'T19 lost reply mid-batch',
  description:
    'drop the server’s reply to a committed batched completion (6 rows), then reset; each retry comes back replayed',
  iterations: { full: 6, ci: 2 },
  async run(ctx, iterations) {
    const proxy = await ctx.proxy();
    const a = await ctx.spawnWorker({
      databaseUrl: proxy.url(ctx.databaseUrl),
      workerId: 'a',
      concurrency: WAVE_CONCURRENCY,
    });
    for (let i = 0; i < iterations; i++) {
      const wave = await enqueueWave(ctx, `t19-${i}`, a, true);
      const held = await waitForBatch(ctx, a, wave, 'held');
      const tokens = expectWholeWave(ctx, wave, held);
      // The tag as the jsonb parameter spells it, quotes included, so no other tag contains it.
      const rule = proxy.dropReplyAfter(JSON.stringify(ctx.rng.pick(wave.tags)));
      const from = a.mark();
      releaseBatch(a, held);
      const connection = await Promise.race([
        rule.tripped,
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000).unref()),
      ]);
      if (connection === undefined) {
        proxy.restore();
        ctx.expect(false, `${wave.key}: the batch's statement never crossed the proxy within 10 s`);
        await expectWaveCompleted(ctx, wave, 'no fault');
        continue;
      }
      ctx.fault('reply dropped: batched completion');
      // The server commits what it received (bounded polling); then the connection dies.
      const committed = await ctx
        .poll('the batch with the dropped reply committed', async () => {
          const [row] = await ctx.sql.unsafe<{ n: number }[]>(
            `SELECT count(*)::int AS n FROM "${ctx.schema}".steps WHERE id = ANY($1::uuid[]) AND status = 'completed'`,
            [[...tokens.keys()]],
          );
          return row?.n === tokens.size ? true : undefined;
        })
        .catch(() => false);
      ctx.expect(committed, `${wave.key}: the statement whose reply was dropped did not commit every row`);
      proxy.restore();
      proxy.resetConnection(connection);
      await expectWaveCompleted(ctx, wave, 'reply lost');

      const rejected = await rejectedCompletions(ctx, tokens.values());
      for (const [stepId, token] of tokens) {
        const acked = await a
          .waitFor('attempt:completed', (m) => m.attempt.token === token, { after: from, timeoutMs: 15_000 })
          .then(() => true)
          .catch(() => false);
        ctx.expect(acked, `${wave.key}: A never saw its completion under ${token} acknowledged`);
        const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).filter((g) => !g.revoke);
        ctx.sample('attemptsPerStep reply lost', grants.length);
        ctx.expect(
          grants.length === 1,
          `${wave.key}: step ${stepId} ${grants.length} grants, want 1 (nothing re-run)`,
        );
        ctx.expect(!rejected.has(token), `${wave.key}: the completion under ${token} was recorded as stale`);
      }
      const answers = answersOf(a, tokens.values(), from);
      for (const [token, got] of answers) {
        ctx.expect(
          got.length === 1 && got[0] === 'replayed',
          `${wave.key}: the completion under ${token} was answered ${got.join(', ') || 'never'}, want replayed once`,
        );
      }
      for (const m of a.messages.slice(from)) {
        if (m.type === 'chaos:batch' && m.phase === 'answered') ctx.sample('retryBatchRows', m.rows.length);
      }
    }
  },
};
