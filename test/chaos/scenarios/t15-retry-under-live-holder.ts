/**
 * T15 — an operator's retry re-creates a step under a live holder (issue "fencing across retries"). A
 * `chaos-flow` run `try { step 0 fails } catch { step 1 compensates }`, where the compensation writes through a
 * fenced resource keyed by `ctx.info.fencing` and keeps going after its signal fires. Worker A holds the
 * compensation and is SIGSTOPped; the run then ends — failed (A's lease runs out with no attempts left) or
 * cancelled by an operator — and the operator retries it: the compensation is retired and its position
 * scheduled again, and worker B runs it. A is SIGCONTed once B has written.
 *
 * Must hold: B is granted the position only after A's lease ended (C-overlap across the rows of one unit of
 * work); B's scope is A's and its epoch and token are higher; every write A attempts after B's first accepted
 * write is refused, by the engine or by the resource (C-stale-fenced by unit of work); A's signal fires.
 */
import type { WorkerProcess } from '../../support/worker-process.js';
import { defineScenario } from '../define-scenario.js';

export const retryUnderLiveHolder = defineScenario('T15 retry under a live holder', {
  description: 'SIGSTOP the compensation’s holder, the run fails or is cancelled, an operator retries it',
  iterations: { full: 12, ci: 2, variants: ['failed', 'cancelled'] as const },
  setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker(), ctx.spawnWorker()]),
  async iteration(ctx, { variant: path }, workers) {
    const L = ctx.timings.leaseMs;
    const { runId } = await ctx.startWorkflow({
      steps: 1,
      iterations: 1,
      // ~60 × (three writes + 50 ms) ≈ 4 s of compensation: the freeze always lands inside it.
      compensate: { iterations: 60, maximumAttempts: path === 'failed' ? 1 : 25 },
    });
    const first = await ctx.waitForClaim(runId, workers);
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers, {
      notToken: first.claim.attempt.token,
    });
    const token = claim.attempt.token;
    const ofA = (m: { attempt: { token: string } }): boolean => m.attempt.token === token;
    await a.waitFor('chaos:op', (m) => ofA(m) && m.op === 'resource-write' && m.phase === 'ok');
    await ctx.sleepUntil(claim.wallMs + ctx.rng.int(100, 800));

    a.kill('SIGSTOP');
    ctx.fault(`sigstop, then the run ${path}`);
    if (path === 'cancelled') await ctx.engine.client.getHandle(runId).cancel('operator');
    const ended = await ctx.waitForRunEnd(runId, 10 * L + 20_000);
    ctx.expect(ended === path, `${runId}: ended ${ended}, expected ${path}`);
    await ctx.engine.client.retry(runId);
    ctx.fault('retry under a live holder');

    // B: the first claim of the re-created compensation (a new step row; step 0 is reset in place).
    const others = workers.filter((w) => w !== a);
    const b = await firstClaimAbove(
      others,
      runId,
      first.claim.attempt.stepId,
      BigInt(token),
      10 * L + 20_000,
    );
    const ofB = (m: { attempt: { token: string } }): boolean => m.attempt.token === b.token;
    await b.worker.waitFor('chaos:op', (m) => ofB(m) && m.op === 'resource-write' && m.phase === 'ok', {
      timeoutMs: 10 * L + 20_000,
    });
    ctx.expect(b.epoch > claim.epoch, `${runId}: B's epoch ${b.epoch} is not above A's ${claim.epoch}`);

    const mark = a.mark();
    a.kill('SIGCONT');
    const resumedAt = Date.now();
    await a.waitFor('fixture:ended', ofA, { timeoutMs: 3 * L + 10_000 });
    const signal = a.all('chaos:op', (m) => ofA(m) && m.op === 'signal')[0];
    ctx.expect(signal !== undefined, `${runId}: A's signal never fired after it was retried away`);
    if (signal && a.messages.indexOf(signal) >= mark) ctx.sample('abortLatencyMs', signal.wallMs - resumedAt);
    // Every fenced write A started after it resumed — after B's first accepted write — is refused. (One in
    // flight when A froze may still commit when A resumes: before B's write, if the resource took it first,
    // which the checker's token-order check judges; or it is rolled back by the idle timeout.)
    const invokedAfter = new Set(
      a
        .all('chaos:op', (m) => ofA(m) && m.phase === 'invoke' && a.messages.indexOf(m) >= mark)
        .map((m) => `${m.op}#${m.seq}`),
    );
    const accepted = a.all(
      'chaos:op',
      (m) => ofA(m) && m.phase === 'ok' && m.op !== 'unfenced-write' && invokedAfter.has(`${m.op}#${m.seq}`),
    );
    ctx.expect(
      accepted.length === 0,
      `${runId}: ${accepted.length} fenced writes A started after B wrote were accepted`,
    );
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  },
});

/** The first claim of `runId` on `workers`, not of step `notStepId`, with a token above `above`. */
async function firstClaimAbove(
  workers: readonly WorkerProcess[],
  runId: string,
  notStepId: string,
  above: bigint,
  timeoutMs: number,
): Promise<{ worker: WorkerProcess; token: string; epoch: number }> {
  const matches = (m: { attempt: { runId: string; stepId: string; token: string } }): boolean =>
    m.attempt.runId === runId && m.attempt.stepId !== notStepId && BigInt(m.attempt.token) > above;
  const claim = await Promise.any(
    workers.map(async (worker) => ({
      worker,
      m: await worker.waitFor('attempt:claimed', matches, { timeoutMs }),
    })),
  );
  return { worker: claim.worker, token: claim.m.attempt.token, epoch: claim.m.epoch };
}
