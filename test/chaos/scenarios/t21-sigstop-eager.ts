/**
 * T21 — SIGSTOP/SIGCONT of a worker holding an eager grant past its lease. Worker A runs a `chaos-flow` of three
 * steps alone (./eager-flow.ts) and is frozen while it holds:
 *
 * - `turn-commit`: the turn that the completion statement of step k − 1 claimed for A (an eager turn), after its
 *   code ran and before its commit is sent (fault point `turn:before-commit`). Worker B, spawned once A is frozen,
 *   claims the turn when its lease expired and finishes the run; then A resumes and sends its commit, which the
 *   fence must refuse and record (`attempt:stale-rejected`, operation `turn-commit`);
 * - `step-completion`: step k, granted to A by its turn's commit (eager dispatch), after its code returned and
 *   with its completion statement held before it is sent (`completion:before-send`). B claims the step when its
 *   lease expired, runs it and finishes the run; then A resumes and sends its completion, which the fence must
 *   refuse and record (`attempt:stale-rejected`, operation `complete`).
 *
 * Pass: the checker's zeros, the run completed with every step completed once (step k of `step-completion`: two
 * grants, two starts, completed under B's token), the held grant was eager, and A's late write was refused and
 * recorded as above.
 */
import { defineScenario } from '../define-scenario.js';
import {
  FLOW_STEPS,
  expectFlowCompleted,
  expectHeldEager,
  expectLateCompletionRefused,
  finishWithB,
  rejectedTurnCommits,
  releaseHold,
  startHeldCompletion,
  startHeldTurn,
  turnAttempts,
} from './eager-flow.js';

export const sigstopEager = defineScenario('T21 SIGSTOP in an eager grant', {
  description:
    'freeze a worker holding an eager turn before its commit / an eagerly dispatched step before its completion, past the lease; the late write is refused',
  iterations: { full: 6, ci: 2, variants: ['turn-commit', 'step-completion'] as const },
  setup: (ctx) => ctx.spawnWorker({ workerId: 'a' }),
  async iteration(ctx, { i, variant }, a) {
    const L = ctx.timings.leaseMs;
    const k = ctx.rng.int(1, FLOW_STEPS - 1);
    if (variant === 'turn-commit') {
      const { flow, held } = await startHeldTurn(ctx, a, `t21-${i}`, 'turn:before-commit', k);
      a.kill('SIGSTOP');
      ctx.fault(`sigstop ${variant}`);
      const b = await ctx.spawnWorker({ workerId: `b${i}` });
      await expectFlowCompleted(ctx, flow.runId, variant);
      a.kill('SIGCONT');
      releaseHold(a, held);
      const reasons = await ctx
        .poll(
          'the late turn commit recorded as stale',
          async () => {
            const r = await rejectedTurnCommits(ctx, held.token);
            return r.length > 0 ? r : undefined;
          },
          10 * L + 20_000,
        )
        .catch(() => []);
      expectHeldEager(ctx, flow, held);
      ctx.expect(
        reasons.length === 1,
        `${flow.runId}: A's late commit of turn ${held.token} recorded ${reasons.length}× as stale (${reasons.join(', ')}), want once`,
      );
      const turn = (await turnAttempts(ctx, flow.runId)).find((t) => t.token === held.token);
      ctx.expect(
        turn?.workerId === a.workerId && turn.outcome !== null && turn.outcome !== 'completed',
        `${flow.runId}: A's turn ${held.token} ended ${turn?.outcome ?? 'missing'}, want lease_expired or rejected_stale`,
      );
      ctx.fault(`turn-commit refused: ${reasons.join(', ')}`);
      await b.stop();
    } else {
      const { flow, held } = await startHeldCompletion(ctx, a, `t21-${i}`, k);
      const { token } = held;
      a.kill('SIGSTOP');
      ctx.fault(`sigstop ${variant}`);
      const claimed = a.all('attempt:claimed', (m) => m.attempt.token === token)[0];
      ctx.expect(
        claimed?.grant === 'eager',
        `${flow.runId}: A's attempt ${token} of step ${k} was ${claimed?.grant ?? 'never claimed'}, want eager`,
      );
      const { b } = await finishWithB(ctx, i, flow, variant, k, held);
      a.kill('SIGCONT');
      const reason = await expectLateCompletionRefused(ctx, a, flow.runId, token);
      ctx.fault(`step-completion refused: ${reason ?? '-'}`);
      await b.stop();
    }
  },
  finish(ctx, a) {
    ctx.expect(a.all('process:fatal').length === 0, 'worker A crashed');
  },
});
