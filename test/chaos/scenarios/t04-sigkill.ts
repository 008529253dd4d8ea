/**
 * T4 — SIGKILL at a random point (research/fencing-semantics.md §3.3): mid-activity (a random moment of the
 * loop), around a heartbeat (when the next one is due) or mid-completion (as soon as the code returned, while
 * the completion is in flight). A replacement worker is spawned; the step must end exactly once. Reports the
 * reclaim latency, from the kill to the next grant of the step (bound: L + reclaim delay + poll + ε).
 *
 * `mid-turn`: a `chaos-flow` workflow of three `chaos-loop` steps; its turn 2 or 3 (chosen at random) BLOCKs its
 * event loop after it was handed the earlier steps' results and before it schedules the next step, holding the
 * turn lease with nothing committed, and its worker is killed there. Another worker must replay the turn once
 * the turn lease expired and finish the run; no completed step runs again (one grant and one start per step),
 * the killed turn ends `lease_expired`. Reports the turn reclaim latency (kill → next turn claim).
 */
import { readGrants } from '../checker.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import { defineScenario } from '../define-scenario.js';
import { SCHEDULING_SLACK_MS, firstFreeSlotMs, measuredLagMs, type ScenarioContext } from '../harness.js';

const KILL_POINTS = ['mid-activity', 'around-heartbeat', 'mid-completion', 'mid-turn'] as const;
const FLOW_STEPS = 3;

export const sigkill = defineScenario('T4 SIGKILL', {
  description:
    'SIGKILL the owner mid-activity / around a heartbeat / mid-completion / mid-turn; reclaim and end once',
  iterations: { full: 12, ci: 4, variants: KILL_POINTS },
  setup: async (ctx): Promise<{ workers: WorkerProcess[] }> => ({
    workers: await Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
  }),
  async iteration(ctx, { variant: point }, state) {
    const { leaseMs: L, heartbeatIntervalMs: H, pollIntervalMs, reclaimDelayMs } = ctx.timings;
    if (point === 'mid-turn') {
      state.workers = await killMidTurn(ctx, state.workers);
      return;
    }
    const { runId, stepId } = await ctx.enqueue({ iterations: point === 'mid-completion' ? 8 : 30 });
    const { worker: a, claim } = await ctx.waitForClaim(runId, state.workers);
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === claim.attempt.token;
    if (point === 'mid-activity') {
      await ctx.sleepUntil(claim.wallMs + ctx.rng.int(50, 1_200));
    } else if (point === 'around-heartbeat') {
      const from = a.mark();
      const beat = await a.waitFor('heartbeat:sent', (m) => m.renewed > 0, {
        after: from,
        timeoutMs: 5 * H,
      });
      await ctx.sleepUntil(beat.wallMs + H - ctx.rng.int(0, 20));
    } else {
      await a.waitFor('fixture:ended', ofAttempt, { timeoutMs: 10_000 });
    }
    a.kill('SIGKILL');
    const killedAt = Date.now();
    ctx.fault(`sigkill ${point}`);
    await a.exited;
    const replacement = await ctx.spawnWorker();
    state.workers = [...state.workers.filter((w) => w !== a), replacement];

    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
    const next = (await readGrants(ctx.sql, ctx.schema, stepId)).find(
      (g) => g.token > BigInt(claim.attempt.token),
    );
    if (next) {
      const latency = next.atMs - killedAt;
      ctx.sample('reclaimLatencyMs', latency);
      const lag = measuredLagMs(state.workers, killedAt, next.atMs);
      // From the later of the expiry and the first free slot (workers run one activity at a time; see T9).
      const roomAfterMs = Math.max(0, firstFreeSlotMs(state.workers, killedAt) - killedAt);
      const bound = Math.max(L + reclaimDelayMs, roomAfterMs) + pollIntervalMs + lag + SCHEDULING_SLACK_MS;
      ctx.expect(
        latency <= bound,
        `${runId}: reclaimed ${Math.round(latency)} ms after the kill (> max(L + reclaim delay, a free slot after ${roomAfterMs}) + poll + λ ${lag} + ε = ${bound})`,
      );
    } else {
      ctx.expect(point === 'mid-completion', `${runId}: killed ${point} but never reclaimed`);
      ctx.fault('killed after its completion committed');
    }
  },
});

/** SIGKILL the worker whose workflow turn is running (blocked mid-turn); the run finishes elsewhere, once. */
async function killMidTurn(ctx: ScenarioContext, workers: WorkerProcess[]): Promise<WorkerProcess[]> {
  const { leaseMs: L, pollIntervalMs } = ctx.timings;
  const blockAt = ctx.rng.int(2, FLOW_STEPS);
  const { runId } = await ctx.startWorkflow({
    steps: FLOW_STEPS,
    iterations: 4,
    blockTurn: { turnAttempt: blockAt, ms: 60_000 },
  });
  const blocked = await Promise.race(
    workers.map((w) =>
      w
        .waitFor('fixture:turn-blocking', (m) => m.runId === runId, { timeoutMs: 20_000 })
        .then((m) => ({ w, m })),
    ),
  );
  const a = blocked.w;
  a.kill('SIGKILL');
  const killedAt = Date.now();
  ctx.fault('sigkill mid-turn');
  await a.exited;
  const replacement = await ctx.spawnWorker();
  const next = [...workers.filter((w) => w !== a), replacement];

  const status = await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  ctx.expect(status === 'completed', `${runId} (mid-turn): run ${status}, want completed`);
  const steps = await ctx.sql.unsafe<{ id: string; status: string }[]>(
    `SELECT id::text, status FROM "${ctx.schema}".steps WHERE run_id = $1 AND kind = 'activity' ORDER BY seq`,
    [runId],
  );
  ctx.expect(steps.length === FLOW_STEPS, `${runId} (mid-turn): ${steps.length} steps, want ${FLOW_STEPS}`);
  const history = ctx.history();
  for (const step of steps) {
    const grants = (await readGrants(ctx.sql, ctx.schema, step.id)).filter((g) => !g.revoke);
    const starts = history.filter((m) => m.type === 'fixture:started' && m.attempt.stepId === step.id);
    ctx.sample('attemptsPerStep mid-turn', grants.length);
    ctx.expect(
      grants.length === 1 && starts.length === 1 && step.status === 'completed',
      `${runId} (mid-turn): step ${step.id} ${step.status}, ${grants.length} grants, started ${starts.length}×, want completed once`,
    );
  }
  const turns = await ctx.sql.unsafe<
    { attempt: number; worker_id: string; outcome: string | null; claimed_ms: number }[]
  >(
    `SELECT attempt, worker_id, outcome, (extract(epoch from claimed_at) * 1000)::float8 AS claimed_ms
       FROM "${ctx.schema}".attempts WHERE run_id = $1 AND kind = 'turn' ORDER BY attempt`,
    [runId],
  );
  const killed = turns.find((t) => t.attempt === blockAt);
  ctx.expect(
    killed?.outcome === 'lease_expired',
    `${runId} (mid-turn): the killed turn ${blockAt} ended ${killed?.outcome ?? 'missing'}, want lease_expired`,
  );
  const replay = turns.find((t) => t.attempt === blockAt + 1);
  if (replay) {
    const latency = replay.claimed_ms - killedAt;
    ctx.sample('turnReclaimLatencyMs', latency);
    const lag = measuredLagMs(next, killedAt, replay.claimed_ms);
    const bound = L + pollIntervalMs + lag + SCHEDULING_SLACK_MS;
    ctx.expect(
      latency <= bound,
      `${runId} (mid-turn): turn reclaimed ${Math.round(latency)} ms after the kill (> L + poll + λ ${lag} + ε = ${bound})`,
    );
    ctx.expect(
      replay.worker_id !== blocked.m.workerId,
      `${runId} (mid-turn): the killed worker replayed its own turn`,
    );
  } else {
    ctx.expect(false, `${runId} (mid-turn): no turn after the killed turn ${blockAt}`);
  }
  return next;
}
