/**
 * T8 — the lease taken away by an operator (research/fencing-semantics.md §3.3). While worker A runs a step, an
 * admin UPDATE bumps its token (`ctx.revoke`: the engine has no revoke of a running attempt; cancel does not
 * bump the token). A learns at its next heartbeat or fenced write and its signal fires. Reports the abort
 * latency from the revoking statement to `ctx.signal`; bound: H + T_hb + the event-loop lag A measured + ε.
 */
import { defineScenario } from '../define-scenario.js';

/** IPC delivery and timer granularity. */
const EPSILON_MS = 100;

export const revoke = defineScenario('T8 token revoked', {
  description: 'an operator bumps the running step’s token; the owner must abort within H + T_hb + λ',
  iterations: { full: 30, ci: 5 },
  setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
  async iteration(ctx, _iteration, workers) {
    const { leaseMs: L, heartbeatIntervalMs: H, heartbeatTimeoutMs } = ctx.timings;
    const { runId, stepId } = await ctx.enqueue({ iterations: 40 });
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
    await ctx.sleepUntil(claim.wallMs + ctx.rng.int(50, 1_200));
    const revokedAt = await ctx.revoke(stepId);
    ctx.fault('revoke');
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === claim.attempt.token;
    const signal = await a.waitFor('chaos:op', (m) => ofAttempt(m) && m.op === 'signal', {
      timeoutMs: 2 * L + 10_000,
    });
    const latency = signal.wallMs - revokedAt;
    ctx.sample('abortLatencyMs', latency);
    const lag = Math.max(
      0,
      ...a
        .all('chaos:lag', (m) => m.wallMs >= revokedAt - 500 && m.wallMs <= signal.wallMs + 500)
        .map((m) => m.maxLagMs),
    );
    const bound = H + heartbeatTimeoutMs + lag + EPSILON_MS;
    ctx.expect(
      latency <= bound,
      `${runId}: aborted ${Math.round(latency)} ms after the revoke (> H + T_hb + λ ${lag} + ε = ${bound})`,
    );
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  },
});
