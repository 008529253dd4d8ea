/**
 * T2 — frozen zombie (research/fencing-semantics.md §3.3). Worker A claims a `chaos-loop` step; at a random
 * point of its loop A is SIGSTOPped for d ∈ {1.2L, 2L, 5L}; worker B reclaims (once the lease expired) and
 * completes; A is SIGCONTed. A's first act after resuming must be its abort (local deadline) or a rejected
 * fenced write or outcome, never a committed stale write. Reports the abort latency after SIGCONT; the checker
 * counts A's stale fenced writes (attempted = rejected) and its unfenced writes after losing the lease.
 */
import { defineScenario } from '../define-scenario.js';

const FREEZE_FACTORS = [1.2, 2, 5] as const;

export const frozenZombie = defineScenario('T2 frozen zombie', {
  description: 'SIGSTOP the owner for 1.2L/2L/5L at a random point, another worker reclaims, SIGCONT',
  iterations: { full: 15, ci: 3, variants: FREEZE_FACTORS },
  setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
  async iteration(ctx, { variant: factor }, workers) {
    const L = ctx.timings.leaseMs;
    // ~40 × (two writes + 50 ms) ≈ 2.5 s of work: the freeze always lands inside the loop.
    const { runId } = await ctx.enqueue({ iterations: 40, sleepMs: 50 });
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
    const token = claim.attempt.token;
    await ctx.sleepUntil(claim.wallMs + ctx.rng.int(50, 1_500));

    a.kill('SIGSTOP');
    const stoppedAt = Date.now();
    ctx.fault(`sigstop ${factor}L`);
    await ctx.sleepUntil(stoppedAt + factor * L);
    const mark = a.mark();
    a.kill('SIGCONT');
    const resumedAt = Date.now();

    // A ends its attempt: by its abort (deadline passed while frozen) or by a rejection.
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === token;
    const ended = await a.waitFor('fixture:ended', ofAttempt, { timeoutMs: 3 * L + 10_000 });
    const signal = a.all('chaos:op', (m) => ofAttempt(m) && m.op === 'signal')[0];
    if (ended.outcome === 'returned' && signal === undefined) {
      // The loop had finished before the freeze: no zombie this iteration.
      ctx.fault('sigstop after the work');
    } else {
      ctx.expect(signal !== undefined, `${runId}: A's signal never fired after a ${factor}L freeze`);
      if (signal && a.messages.indexOf(signal) >= mark)
        ctx.sample('abortLatencyMs', signal.wallMs - resumedAt);
      ctx.expect(
        a.all('attempt:completed', ofAttempt).length === 0,
        `${runId}: the zombie's completion was accepted after a ${factor}L freeze`,
      );
    }
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  },
});
