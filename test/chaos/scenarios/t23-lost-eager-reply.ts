/**
 * T23 — a lost reply to a statement that made an eager grant. Worker A reaches PostgreSQL through its own TCP
 * proxy (`prepare=false`, so a COMMIT is sent as text) and runs a `chaos-flow` of three steps alone
 * (./eager-flow.ts); the proxy drops the server's reply to one statement, which commits; once it has, the
 * connection is destroyed, as a network failure after the commit would:
 *
 * - `completion-claiming-turn`: the completion of step k (held before it is sent, then released with the rule
 *   armed on its tag, which its output carries). It commits the step's outcome and claims the run's next turn
 *   for A (an eager turn, seen in the database: the turn's attempt row was written by the completion's
 *   transaction); A never hears of it. A retries the completion, which must come back `replayed`; the lost turn's
 *   lease expires and the turn is claimed again;
 * - `turn-commit-dispatching`: the reply to the commit of the turn that schedules step k, which granted A step k
 *   (eager dispatch; the commit is one statement, run and committed by the server at its Sync: the rule arms on
 *   the step's tag in that statement's parameters and drops every reply from there on). A never starts the step;
 *   its lease expires and it is claimed again and run once.
 *
 * Pass: the checker's zeros, the run completed, every step completed once (one grant, one start; step k of
 * `turn-commit-dispatching`: two grants — the lost eager one, never started — and one start), and per variant the
 * answers and grants above.
 */
import { defineScenario } from '../define-scenario.js';
import { cutConnection, spawnBehindProxy } from '../proxy-faults.js';
import { expectAcknowledged, expectAnsweredOnce, expectNoneStale } from './completions.js';
import {
  FLOW_STEPS,
  dropFlowReply,
  expectFlowCompleted,
  flowSteps,
  grantedAtInsert,
  startEagerFlow,
  startHeldCompletion,
  startsUnder,
  turnAttempts,
} from './eager-flow.js';

const VARIANTS = ['completion-claiming-turn', 'turn-commit-dispatching'] as const;

export const lostEagerReply = defineScenario('T23 lost reply of an eager grant', {
  description:
    'drop the server’s reply to a completion that eagerly claimed a turn / a turn commit that eagerly dispatched a step; the lost grant expires and is re-granted',
  iterations: { full: 6, ci: 2, variants: VARIANTS },
  setup: (ctx) => spawnBehindProxy(ctx, { workerId: 'a', unprepared: true }),
  async iteration(ctx, { i, variant }, { proxy, worker: a }) {
    const k = ctx.rng.int(1, FLOW_STEPS - 1);
    if (variant === 'completion-claiming-turn') {
      const { flow, held } = await startHeldCompletion(ctx, a, `t23-${i}`, k);
      const { token, stepId } = held;
      const from = a.mark();
      const connection = await dropFlowReply(ctx, proxy, flow, k, {
        send: () => a.command({ token, action: 'release-completion', by: 'scenario' }),
        missed: `${flow.runId}: the completion of step ${k} never crossed the proxy`,
      });
      if (connection === undefined) return;
      ctx.fault('reply dropped: completion claiming a turn');
      // The server commits what it received (bounded polling): the step's outcome and the eager turn.
      const lost = await ctx
        .poll('the completion with the dropped reply committed', async () => {
          const [row] = await ctx.sql.unsafe<
            { status: string; turn_token: string | null; turn_worker_id: string | null; same_tx: boolean }[]
          >(
            `SELECT s.status, r.turn_token::text, r.turn_worker_id,
                      EXISTS (SELECT 1 FROM "${ctx.schema}".attempt_records t
                               WHERE t.fencing_token = r.turn_token AND t.kind = 'turn' AND t.outcome IS NULL
                                 AND t.xmin::text = s.xmin::text AND s.status = 'completed') AS same_tx
                 FROM "${ctx.schema}".steps s JOIN "${ctx.schema}".runs r ON r.id = s.run_id WHERE s.id = $1`,
            [stepId],
          );
          return row?.status === 'completed' ? row : undefined;
        })
        .catch(() => undefined);
      ctx.expect(
        lost?.same_tx === true && lost.turn_worker_id === a.workerId,
        `${flow.runId}: the completion whose reply was dropped ${lost ? '' : 'did not commit; it '}claimed turn ` +
          `${lost?.turn_token ?? '-'} for ${lost?.turn_worker_id ?? '-'} (in its own transaction: ${lost?.same_tx}), ` +
          `want an eager turn for A`,
      );
      cutConnection(proxy, connection);
      await expectFlowCompleted(ctx, flow.runId, variant);

      expectAnsweredOnce(ctx, a, flow.runId, [token], 'replayed', { after: from });
      await expectAcknowledged(ctx, a, flow.runId, token, { after: from, timeoutMs: 10_000 });
      await expectNoneStale(ctx, flow.runId, [token]);
      const turns = await turnAttempts(ctx, flow.runId);
      const lostTurn = turns.find((t) => t.token === lost?.turn_token);
      const after = turns.find((t) => lost?.turn_token && BigInt(t.token) > BigInt(lost.turn_token));
      ctx.expect(
        lostTurn?.outcome === 'lease_expired' && after !== undefined,
        `${flow.runId}: the lost eager turn ${lost?.turn_token ?? '-'} ended ${lostTurn?.outcome ?? 'missing'}, ` +
          `${after ? `then turn ${after.attempt} by ${after.workerId}` : 'and no turn followed'}; want lease_expired, then re-granted`,
      );
    } else {
      const flow = await startEagerFlow(ctx, `t23-${i}`);
      const connection = await dropFlowReply(ctx, proxy, flow, k, {
        missed: `${flow.runId}: the turn commit scheduling step ${k} never crossed the proxy`,
      });
      if (connection === undefined) return;
      ctx.fault('reply dropped: turn commit dispatching');
      const step = await ctx
        .poll('the turn commit with the dropped reply committed', async () => {
          const s = (await flowSteps(ctx, flow.runId))[k];
          return s ? await grantedAtInsert(ctx, s.id).then((g) => ({ ...s, ...g })) : undefined;
        })
        .catch(() => undefined);
      ctx.expect(
        step?.eager === true && step.workerId === a.workerId,
        `${flow.runId}: the turn commit whose reply was dropped ${step ? '' : 'did not commit; it '}granted ` +
          `step ${k} ${step?.eager ? 'eagerly' : 'not eagerly'} to ${step?.workerId ?? '-'}, want eagerly to A`,
      );
      cutConnection(proxy, connection);
      const { grants } = await expectFlowCompleted(
        ctx,
        flow.runId,
        variant,
        new Map([[k, { grants: 2, starts: 1 }]]),
      );
      const [first, second] = grants[k] ?? [];
      const lostToken = step?.token ?? '';
      ctx.expect(
        first?.token.toString() === lostToken && second !== undefined,
        `${flow.runId}: step ${k}'s grants ${grants[k]?.map((g) => g.token).join(', ')}, want the lost eager ` +
          `grant ${lostToken}, then another`,
      );
      ctx.expect(
        startsUnder(ctx, lostToken) === 0,
        `${flow.runId}: the lost eager grant ${lostToken} of step ${k} started, though A never heard of it`,
      );
      if (second && first)
        ctx.sample('reclaimLatencyMs eager dispatch', second.engineAtMs - first.engineAtMs);
    }
  },
  finish(ctx, { worker: a }) {
    ctx.expect(a.all('process:fatal').length === 0, 'worker A crashed');
  },
});
