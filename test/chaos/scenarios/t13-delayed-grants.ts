/**
 * T13 — grant freshness (research/fencing-semantics.md §3.3; I12). The worker's proxy delays every reply from
 * the database by 0.6L (requests go through at once), so each claim's grant is 0.6L old when it arrives — less
 * than the `minGrantFreshness` (0.5) of its lease is left. Every such grant must be released unstarted (worker
 * event `attempt:released`, why `stale-grant`; the activity never starts under that token). Then the delay is
 * lifted and the step runs to completion on a fresh grant. Reports delayed grants and releases (must be equal).
 */
import { defineScenario } from '../define-scenario.js';
import { spawnBehindProxy } from '../proxy-faults.js';

const REPLY_DELAY_FACTOR = 0.6;

export const delayedGrants = defineScenario('T13 delayed grants', {
  description: 'claim replies delayed by 0.6L: every stale grant is released unstarted, then runs fresh',
  iterations: { full: 20, ci: 2 },
  setup: (ctx) => spawnBehindProxy(ctx, { workerId: 't13-a' }),
  async iteration(ctx, _iteration, { proxy, worker: a }) {
    const L = ctx.timings.leaseMs;
    proxy.delayReplies(REPLY_DELAY_FACTOR * L);
    const delayedFrom = a.mark();
    const { runId } = await ctx.enqueue({ iterations: 5, sleepMs: 20 });
    const ofRun = (m: { attempt: { runId: string } }): boolean => m.attempt.runId === runId;
    await a.waitFor('attempt:released', (m) => ofRun(m) && m.why === 'stale-grant', {
      after: delayedFrom,
      timeoutMs: 6 * L + 10_000,
    });
    // Every reply received from here on left the database after the delay was lifted.
    proxy.restore();
    const restoredAt = Date.now();
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);

    const claims = a.all('attempt:claimed', ofRun);
    const released = new Set(
      a.all('attempt:released', (m) => ofRun(m) && m.why === 'stale-grant').map((m) => m.attempt.token),
    );
    const started = new Set(a.all('fixture:started', ofRun).map((m) => m.attempt.token));
    // A claim whose reply arrived before the restore was surely delayed by 0.6L.
    const delayed = claims.filter((c) => c.wallMs < restoredAt);
    for (const c of delayed) {
      ctx.fault('delayed grant');
      ctx.expect(
        released.has(c.attempt.token),
        `${runId}: grant ${c.attempt.token} arrived 0.6L late and was not released`,
      );
      ctx.expect(
        !started.has(c.attempt.token),
        `${runId}: the activity started on grant ${c.attempt.token}, 0.6L old on arrival`,
      );
    }
    for (let n = 0; n < released.size; n++) ctx.fault('stale-grant release');
    const completed = a.all('attempt:completed', ofRun);
    ctx.expect(
      completed.length === 1,
      `${runId}: did not complete on a fresh grant after the delay was lifted`,
    );
    // Released grants never ran, so none is charged to the retry budget: the run is attempt 1.
    ctx.expect(
      completed[0]?.attempt.attempt === 1,
      `${runId}: completed as attempt ${completed[0]?.attempt.attempt}; unstarted grants were charged`,
    );
  },
});
