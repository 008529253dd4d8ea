/**
 * T24 — faults inside a fused step. Worker A runs a `chaos-flow` of three steps alone (./eager-flow.ts) with fused
 * steps on (worker option `fuseSteps`): the completion of each step carries the run's next turn — run beforehand on the workflow
 * instance A keeps, granted and committed in the completion's own statement, which also grants A the step that
 * turn schedules (eager dispatch). The completion of step k is held before it is sent (`completion:before-send`,
 * after the turn's code ran), then:
 *
 * - `sigkill`: A is killed. Nothing of the fused step was written: step k's lease expires, worker B claims it,
 *   runs it again and finishes the run;
 * - `sigstop`: A is frozen past the lease; B claims step k and finishes the run; A resumes and sends its fused
 *   statement, which must not apply (its attempt no longer holds the step), and then its completion on its own,
 *   which the fence must refuse and record (`attempt:stale-rejected`, operation `complete`);
 * - `terminate`: released while an admin holds the run's row, the fused statement waits in its run lock and its
 *   backend is terminated. It committed nothing; A records the completion on its own, once (`applied`);
 * - `lost-reply`: A reaches PostgreSQL through its own TCP proxy, which drops the server's reply to the fused
 *   statement (armed on step k's tag, which its output carries); the statement commits. A records the completion
 *   on its own, which comes back `replayed`; the turn was committed by the lost statement, and the step it granted
 *   A (step k + 1, when there is one) is never started by A: its lease expires and it is claimed again and run once.
 *
 * Pass: the checker's zeros, the run completed with every step completed once, A's turn before step k was fused
 * (the flow ran fused steps), and per variant: A's turn attempts (the fused turn of step k granted only when the
 * statement committed), step k's grants and starts, and the answers above.
 */
import { withApplicationName } from '../backend-faults.js';
import { defineScenario } from '../define-scenario.js';
import type { ScenarioContext } from '../harness.js';
import { cutConnection } from '../proxy-faults.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import { expectAnsweredOnce, expectNoneStale } from './completions.js';
import {
  FLOW_STEPS,
  dropFlowReply,
  expectAppliedOnce,
  expectFlowCompleted,
  expectLateCompletionRefused,
  finishWithB,
  startHeldCompletion,
  startsUnder,
  terminateReleasedCompletion,
  turnAttempts,
  type EagerFlow,
} from './eager-flow.js';
import { unprepared } from '../../support/tcp-proxy.js';

const APPLICATION_NAME = 'chaos-t24-a';
/**
 * A fragment of the fused step's statement (its run fence, queries/turn-commit/run-lock.ts), near its start:
 * pg_stat_activity keeps only the start of a long statement (track_activity_query_size).
 */
const FUSED_STATEMENT = '%lk.turn_worker_id =%';

export const fusedStep = defineScenario('T24 faults inside a fused step', {
  description:
    'SIGKILL / SIGSTOP / backend termination / a lost reply at the statement that completes a step and commits its run’s next turn; nothing is lost or written twice',
  iterations: { full: 8, ci: 4, variants: ['sigkill', 'sigstop', 'terminate', 'lost-reply'] as const },
  async setup(ctx) {
    const proxy = await ctx.proxy();
    return { proxy, proxied: unprepared(proxy.url(ctx.databaseUrl)) };
  },
  async iteration(ctx, { i, variant }, { proxy, proxied }) {
    const a = await ctx.spawnWorker({
      workerId: `a${i}`,
      fuseSteps: true,
      databaseUrl:
        variant === 'lost-reply' ? proxied : withApplicationName(ctx.databaseUrl, `${APPLICATION_NAME}-${i}`),
    });
    const k = ctx.rng.int(1, FLOW_STEPS - 1);
    const { flow, held } = await startHeldCompletion(ctx, a, `t24-${i}`, k);
    const { token } = held;
    const fusedBefore = a
      .all('turn:committed', (m) => m.runId === flow.runId)
      .map((m) => m.grant)
      .slice(1);
    ctx.expect(
      fusedBefore.length === k && fusedBefore.every((g) => g === 'fused'),
      `${flow.runId}: A's turns after the first were ${fusedBefore.join(', ') || 'none'}, want ${k} fused`,
    );
    const from = a.mark();
    if (variant === 'sigkill' || variant === 'sigstop') {
      a.kill(variant === 'sigkill' ? 'SIGKILL' : 'SIGSTOP');
      ctx.fault(`${variant} before a fused statement`);
      const { b } = await finishWithB(ctx, i, flow, variant, k, { token });
      if (variant === 'sigstop') {
        a.kill('SIGCONT');
        const reason = await expectLateCompletionRefused(ctx, a, flow.runId, token);
        ctx.fault(`late fused completion refused: ${reason ?? '-'}`);
      }
      await expectTurnsOfA(ctx, flow, a, k + 1);
      await b.stop();
    } else if (variant === 'terminate') {
      await terminateReleasedCompletion(ctx, a, flow.runId, token, {
        applicationName: `${APPLICATION_NAME}-${i}`,
        pattern: FUSED_STATEMENT,
      });
      ctx.fault('terminated: fused statement');
      await expectFlowCompleted(ctx, flow.runId, variant);
      await expectAppliedOnce(ctx, a, flow.runId, token, from);
      const next = a.all('turn:committed', (m) => m.runId === flow.runId)[k + 1];
      ctx.expect(
        next?.grant === 'eager',
        `${flow.runId}: A's turn after the terminated fused statement was ${next?.grant ?? 'never committed'}, ` +
          `want eager (claimed by the completion recorded on its own)`,
      );
    } else {
      const connection = await dropFlowReply(ctx, proxy, flow, k, {
        send: () => a.command({ token, action: 'release-completion', by: 'scenario' }),
        missed: `${flow.runId}: the fused statement of step ${k} never crossed the proxy`,
      });
      if (connection === undefined) {
        await a.stop();
        return;
      }
      ctx.fault('reply dropped: fused statement');
      // The server commits what it received (bounded polling): the step's outcome and the turn after it.
      const turn = await ctx
        .poll('the fused statement with the dropped reply committed', async () => {
          const t = (await turnAttempts(ctx, flow.runId))[k + 1];
          return t?.outcome === 'completed' ? t : undefined;
        })
        .catch(() => undefined);
      ctx.expect(
        turn?.workerId === a.workerId,
        `${flow.runId}: the fused statement whose reply was dropped ${turn ? `committed turn ${turn.attempt} by ${turn.workerId}` : 'did not commit its turn'}, want A's`,
      );
      cutConnection(proxy, connection);
      const last = k === FLOW_STEPS - 1;
      const { grants } = await expectFlowCompleted(
        ctx,
        flow.runId,
        variant,
        last ? new Map() : new Map([[k + 1, { grants: 2, starts: 1 }]]),
      );
      expectAnsweredOnce(ctx, a, flow.runId, [token], 'replayed', { after: from });
      await expectNoneStale(ctx, flow.runId, [token]);
      if (!last) {
        const lostToken = grants[k + 1]?.[0]?.token.toString() ?? '';
        ctx.expect(
          startsUnder(ctx, lostToken) === 0,
          `${flow.runId}: the grant ${lostToken} of step ${k + 1} made by the lost fused statement started, though A never heard of it`,
        );
      }
    }
    if (variant !== 'sigkill') await a.stop();
    ctx.expect(a.all('process:fatal').length === 0, `worker ${a.workerId} crashed`);
  },
});

/** A held `count` turn attempts of the flow, all committed: the held fused turn was never granted. */
async function expectTurnsOfA(
  ctx: ScenarioContext,
  flow: EagerFlow,
  a: WorkerProcess,
  count: number,
): Promise<void> {
  const turns = await turnAttempts(ctx, flow.runId);
  const mine = turns.filter((t) => t.workerId === a.workerId);
  ctx.expect(
    mine.length === count &&
      mine.every((t) => t.outcome === 'completed') &&
      turns.every((t) => t.outcome !== null),
    `${flow.runId}: A's turns ${mine.map((t) => t.outcome).join(', ')} (all: ${turns.map((t) => t.outcome).join(', ')}), ` +
      `want ${count} completed and none left open`,
  );
}
