/**
 * T22 — backend termination of a statement that makes an eager grant. Worker A runs a `chaos-flow` of three steps
 * alone (./eager-flow.ts); the backend carrying one of its statements (A's session, found in `pg_stat_activity` by
 * `application_name`) is terminated while the statement waits on an admin's lock in the database:
 *
 * - `turn-commit-dispatching`: the commit of the (eager) turn that schedules step k, held before it is sent
 *   (`turn:before-commit`) while an admin holds the next grant of a token to a step of the run
 *   (../backend-faults.ts `lockRow('grants')`); released, the commit's steps statement — the one that grants A
 *   step k — waits there, in the insert of the granted step, and is terminated. The turn commits nothing; its lease expires,
 *   the turn runs again and its commit grants step k (eagerly, to A), which runs once;
 * - `completion-claiming-turn`: the completion of step k, held before it is sent while an admin locks the run's
 *   row; released, the statement waits in its run lock and is terminated. It commits nothing; A retries it
 *   (idempotent by nonce), the retry applies once and claims the run's next turn for A (an eager turn).
 *
 * Pass: the checker's zeros, the run completed with every step granted once and started once, and per variant:
 * the terminated turn ended `lease_expired` and step k was granted eagerly after it / the completion was answered
 * `applied` exactly once after the termination, never recorded as stale, and A's next turn of the run was eager.
 */
import {
  COMPLETION_STATEMENT,
  installGrantHold,
  terminateWhileLocked,
  withApplicationName,
} from '../backend-faults.js';
import { defineScenario } from '../define-scenario.js';
import {
  FLOW_STEPS,
  expectAppliedOnce,
  expectFlowCompleted,
  flowStep,
  releaseHold,
  startHeldCompletion,
  startHeldTurn,
  terminateReleasedCompletion,
  turnAttempts,
} from './eager-flow.js';

const VARIANTS = ['turn-commit-dispatching', 'completion-claiming-turn'] as const;
const APPLICATION_NAME = 'chaos-t22-a';
/**
 * A fragment of commitTurn's statement (assembled in queries/turn-commit/statement.ts), which grants eagerly, from its first lines:
 * pg_stat_activity keeps only the start of a long statement (track_activity_query_size).
 */
const TURN_STEPS_STATEMENT = '%r.turn_nonce, r.turn_lease_expires_at%';

export const terminateEager = defineScenario('T22 backend termination in an eager grant', {
  description:
    'pg_terminate_backend on a turn commit that eagerly dispatches / a completion that eagerly claims a turn; nothing granted is lost',
  iterations: { full: 6, ci: 2, variants: VARIANTS },
  async setup(ctx) {
    await installGrantHold(ctx);
    return ctx.spawnWorker({
      databaseUrl: withApplicationName(ctx.databaseUrl, APPLICATION_NAME),
      workerId: 'a',
    });
  },
  async iteration(ctx, { i, variant }, a) {
    const k = ctx.rng.int(1, FLOW_STEPS - 1);
    if (variant === 'turn-commit-dispatching') {
      const { flow, held } = await startHeldTurn(ctx, a, `t22-${i}`, 'turn:before-commit', k);
      const first = await flowStep(ctx, flow.runId, 0);
      await terminateWhileLocked(ctx, {
        lock: { table: 'grants', id: first.id },
        backend: { applicationName: APPLICATION_NAME, pattern: TURN_STEPS_STATEMENT },
        release: () => releaseHold(a, held),
        label: flow.runId,
        fault: 'terminated: turn commit dispatching',
      });
      const { steps } = await expectFlowCompleted(ctx, flow.runId, variant);
      const turns = await turnAttempts(ctx, flow.runId);
      const terminated = turns.find((t) => t.token === held.token);
      ctx.expect(
        held.grant === 'eager' && terminated?.outcome === 'lease_expired',
        `${flow.runId}: the terminated (${held.grant}) turn ${held.token} ended ${terminated?.outcome ?? 'missing'}, want lease_expired`,
      );
      const step = steps[k];
      const claim = a.all('attempt:claimed', (m) => m.attempt.stepId === step?.id);
      ctx.expect(
        claim.length === 1 && claim[0]?.grant === 'eager' && claim[0].attempt.token === step?.token,
        `${flow.runId}: step ${k} claimed ${claim.map((c) => c.grant).join(', ') || 'never'} by A, ` +
          `want one eager grant by the turn's next commit`,
      );
    } else {
      const { flow, held } = await startHeldCompletion(ctx, a, `t22-${i}`, k);
      const { token } = held;
      const from = a.mark();
      await terminateReleasedCompletion(ctx, a, flow.runId, token, {
        applicationName: APPLICATION_NAME,
        pattern: COMPLETION_STATEMENT,
      });
      ctx.fault('terminated: completion claiming a turn');
      await expectFlowCompleted(ctx, flow.runId, variant);
      await expectAppliedOnce(ctx, a, flow.runId, token, from);
      const next = a.messages.slice(from).find((m) => m.type === 'turn:committed' && m.runId === flow.runId);
      ctx.expect(
        next?.type === 'turn:committed' && next.grant === 'eager',
        `${flow.runId}: A's turn after the retried completion was ${next?.type === 'turn:committed' ? next.grant : 'never committed'}, want eager`,
      );
    }
  },
  finish(ctx, a) {
    ctx.expect(a.all('process:fatal').length === 0, 'worker A crashed');
  },
});
