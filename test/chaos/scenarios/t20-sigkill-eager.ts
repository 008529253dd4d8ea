/**
 * T20 — SIGKILL inside an eager grant. Worker A runs a `chaos-flow` of three steps alone (./eager-flow.ts) and is
 * killed while it holds a grant no claim of its own took:
 *
 * - `eager-turn`: the turn that the completion statement of step k − 1 claimed for A (an eager turn), after that
 *   statement committed and before the turn's code ran (fault point `turn:before-run`). The turn's lease must
 *   expire and worker B, spawned after the kill, must claim and run it;
 * - `eager-dispatch`: the step k that the commit of A's turn granted A (eager dispatch), after the commit returned
 *   and before A started it (fault point `dispatch:before-start`). The step's lease must expire and B must claim
 *   and run it.
 *
 * Pass: the checker's zeros, the run completed, every step completed once: one grant and one start each, but for
 * `eager-dispatch` step k: two grants (A's eager one, never started, and B's) and one start, by B; the held grant
 * was eager (the engine said so at the fault point); the killed turn ended `lease_expired` and its successor was
 * claimed by B.
 */
import { defineScenario } from '../define-scenario.js';
import {
  FLOW_STEPS,
  expectFlowCompleted,
  expectHeldEager,
  grantedAtInsert,
  startHeldTurn,
  startsUnder,
  turnAttempts,
} from './eager-flow.js';

/** Where A is killed, by variant: holding an eager turn before it runs / an eagerly dispatched step before it starts. */
const KILL_POINT = { 'eager-turn': 'turn:before-run', 'eager-dispatch': 'dispatch:before-start' } as const;

export const sigkillEager = defineScenario('T20 SIGKILL in an eager grant', {
  description:
    'SIGKILL a worker holding an eager turn (before it runs) / an eagerly dispatched step (before it starts); re-granted, run once',
  iterations: { full: 6, ci: 2, variants: ['eager-turn', 'eager-dispatch'] as const },
  async iteration(ctx, { i, variant }) {
    const a = await ctx.spawnWorker({ workerId: `a${i}` });
    const k = ctx.rng.int(1, FLOW_STEPS - 1);
    const point = KILL_POINT[variant];
    const { flow, held } = await startHeldTurn(ctx, a, `t20-${i}`, point, k);
    a.kill('SIGKILL');
    const killedAt = Date.now();
    ctx.fault(`sigkill ${variant}`);
    await a.exited;
    const b = await ctx.spawnWorker({ workerId: `b${i}` });

    const expect = new Map<number, { grants: number; starts: number }>();
    if (variant === 'eager-dispatch') expect.set(k, { grants: 2, starts: 1 });
    const { steps, grants } = await expectFlowCompleted(ctx, flow.runId, variant, expect);
    const turns = await turnAttempts(ctx, flow.runId);
    if (variant === 'eager-turn') {
      expectHeldEager(ctx, flow, held);
      const killed = turns.find((t) => t.token === held.token);
      ctx.expect(
        killed?.workerId === a.workerId && killed.outcome === 'lease_expired',
        `${flow.runId}: the killed eager turn ${held.token} is ${killed?.workerId ?? '-'} ${killed?.outcome ?? 'missing'}, ` +
          `want ${a.workerId} lease_expired`,
      );
      const next = turns.find((t) => BigInt(t.token) > BigInt(held.token));
      ctx.expect(
        next?.workerId === b.workerId && next.attempt === held.turnAttempt + 1,
        `${flow.runId}: the turn after the killed one is ${next ? `${next.attempt} by ${next.workerId}` : 'missing'}, ` +
          `want ${held.turnAttempt + 1} by ${b.workerId}`,
      );
      const replayed = await b
        .waitFor('turn:committed', (m) => m.runId === flow.runId, { timeoutMs: 5_000 })
        .catch(() => undefined);
      ctx.expect(
        replayed?.grant === 'claimed',
        `${flow.runId}: B's first turn was ${replayed?.grant ?? 'never committed'}, want claimed (the expired lease)`,
      );
    } else {
      const [grant] = held.steps;
      const step = steps[k];
      const dispatched = step ? await grantedAtInsert(ctx, step.id) : undefined;
      ctx.expect(
        held.steps.length === 1 && grant?.stepId === step?.id && dispatched?.eager === true,
        `${flow.runId}: the held dispatch granted ${held.steps.map((s) => s.stepId).join(', ')}, want step ${k} ` +
          `(${step?.id}) granted at its insert (eager: ${dispatched?.eager})`,
      );
      const [first, second] = grants[k] ?? [];
      ctx.expect(
        first?.token.toString() === grant?.token &&
          first?.workerId === a.workerId &&
          second?.workerId === b.workerId,
        `${flow.runId}: step ${k} granted to ${first?.workerId}/${second?.workerId}, want A's eager grant ` +
          `${grant?.token}, then B's`,
      );
      ctx.expect(
        startsUnder(ctx, grant?.token) === 0,
        `${flow.runId}: A's eagerly dispatched attempt ${grant?.token} started, though A was killed first`,
      );
      if (second) ctx.sample('reclaimLatencyMs', second.atMs - killedAt);
    }
    await b.stop();
  },
});
