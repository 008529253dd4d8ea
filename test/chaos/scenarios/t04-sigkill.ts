/**
 * T4 — SIGKILL at a random point (research/fencing-semantics.md §3.3): mid-activity (a random moment of the
 * loop), around a heartbeat (when the next one is due) or mid-completion (as soon as the code returned, while
 * the completion is in flight). A replacement worker is spawned; the step must end exactly once. Reports the
 * reclaim latency, from the kill to the next grant of the step (bound: L + reclaim delay + poll + ε).
 */
import { readGrants } from '../checker.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import type { Scenario } from '../harness.js';

const KILL_POINTS = ['mid-activity', 'around-heartbeat', 'mid-completion'] as const;
/** Scheduling slack on a loaded 2-core machine. */
const EPSILON_MS = 1_500;

export const sigkill: Scenario = {
  name: 'T4 SIGKILL',
  description: 'SIGKILL the owner mid-activity / around a heartbeat / mid-completion; reclaim and end once',
  iterations: { full: 12, ci: 3 },
  async run(ctx, iterations) {
    const { leaseMs: L, heartbeatIntervalMs: H, pollIntervalMs, reclaimDelayMs } = ctx.timings;
    let workers: WorkerProcess[] = await Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]);
    for (let i = 0; i < iterations; i++) {
      const point = KILL_POINTS[i % KILL_POINTS.length] ?? 'mid-activity';
      const { runId, stepId } = await ctx.enqueue({ iterations: point === 'mid-completion' ? 8 : 30 });
      const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
      const ofAttempt = (m: { attempt: { token: string } }): boolean =>
        m.attempt.token === claim.attempt.token;
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
      workers = [...workers.filter((w) => w !== a), replacement];

      await ctx.waitForRunEnd(runId, 10 * L + 20_000);
      const next = (await readGrants(ctx.sql, ctx.schema, stepId)).find(
        (g) => g.token > BigInt(claim.attempt.token),
      );
      if (next) {
        const latency = next.atMs - killedAt;
        ctx.sample('reclaimLatencyMs', latency);
        const bound = L + reclaimDelayMs + pollIntervalMs + EPSILON_MS;
        ctx.expect(
          latency <= bound,
          `${runId}: reclaimed ${Math.round(latency)} ms after the kill (> ${bound})`,
        );
      } else {
        ctx.expect(point === 'mid-completion', `${runId}: killed ${point} but never reclaimed`);
        ctx.fault('killed after its completion committed');
      }
    }
  },
};
