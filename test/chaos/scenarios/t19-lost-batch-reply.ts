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
import { defineScenario } from '../define-scenario.js';
import { cutConnection, dropReply, spawnBehindProxy } from '../proxy-faults.js';
import { WAVE_CONCURRENCY, expectRetriedOnce, expectWaveCompleted, startHeldWave } from './batch-wave.js';
import { expectAnsweredOnce, expectNoneStale } from './completions.js';

export const lostBatchReply = defineScenario('T19 lost reply mid-batch', {
  description:
    'drop the server’s reply to a committed batched completion (6 rows), then reset; each retry comes back replayed',
  iterations: { full: 6, ci: 2 },
  setup: (ctx) => spawnBehindProxy(ctx, { workerId: 'a', concurrency: WAVE_CONCURRENCY }),
  async iteration(ctx, { i }, { proxy, worker: a }) {
    const { wave, tokens, release } = await startHeldWave(ctx, `t19-${i}`, a);
    const from = a.mark();
    const connection = await dropReply(ctx, proxy, {
      // The tag as the jsonb parameter spells it, quotes included, so no other tag contains it.
      marker: JSON.stringify(ctx.rng.pick(wave.tags)),
      send: release,
      timeoutMs: 10_000,
      missed: `${wave.key}: the batch's statement never crossed the proxy within 10 s`,
    });
    if (connection === undefined) {
      await expectWaveCompleted(ctx, wave, 'no fault');
      return;
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
    cutConnection(proxy, connection);
    await expectWaveCompleted(ctx, wave, 'reply lost');

    await expectNoneStale(ctx, wave.key, tokens.values());
    const ack = { after: from, timeoutMs: 15_000 };
    await expectRetriedOnce(ctx, a, wave, tokens, { what: 'reply lost', from, ack });
    expectAnsweredOnce(ctx, a, wave.key, tokens.values(), 'replayed', { after: from });
  },
});
