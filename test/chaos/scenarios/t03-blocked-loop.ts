/**
 * T3 — a blocked event loop (the GC-pause proxy; research/fencing-semantics.md §3.3). The activity spins
 * synchronously for 2L at a random iteration: on the main thread (no heartbeat can go out: the lease expires,
 * another worker reclaims, and the owner must abort as soon as its loop runs again, its late writes rejected),
 * and in a worker_thread (the main loop keeps heartbeating: no reclaim, the attempt completes).
 */
import { readGrants } from '../checker.js';
import { defineScenario } from '../define-scenario.js';

export const blockedLoop = defineScenario('T3 blocked event loop', {
  description:
    'busy loop of 2L in the activity: main thread (must be fenced out) vs worker_thread (keeps lease)',
  iterations: { full: 10, ci: 2, variants: ['main', 'thread'] as const },
  setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
  async iteration(ctx, { variant: where }, workers) {
    const L = ctx.timings.leaseMs;
    const atSeq = ctx.rng.int(1, 15);
    const { runId, stepId } = await ctx.enqueue({
      iterations: 20,
      block: { atSeq, ms: 2 * L, where, onEpoch: 1 },
    });
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
    ctx.fault(`block ${where}`);
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === claim.attempt.token;
    const unblocked = await a.waitFor('fixture:unblocked', ofAttempt, { timeoutMs: 4 * L + 10_000 });
    await a.waitFor('fixture:ended', ofAttempt, { timeoutMs: 3 * L + 10_000 });
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
    const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).length;
    if (where === 'main') {
      const signal = a.all('chaos:op', (m) => ofAttempt(m) && m.op === 'signal')[0];
      ctx.expect(signal !== undefined, `${runId}: no abort after blocking the main thread for 2L`);
      if (signal) ctx.sample('abortLatencyMs', signal.wallMs - unblocked.wallMs);
      ctx.expect(grants >= 2, `${runId}: not reclaimed while its owner's loop was blocked for 2L`);
    } else {
      ctx.expect(grants === 1, `${runId}: reclaimed (${grants} grants) while only a worker_thread was busy`);
      ctx.expect(
        a.all('attempt:completed', ofAttempt).length === 1,
        `${runId}: the worker_thread attempt did not complete`,
      );
    }
  },
});
