/**
 * T27 — a crash between a fused step's effect and its record. Worker A runs a `chaos-flow` of three steps alone
 * with fused steps (the default): each step records its unit of work once in the `ledger` table through a fenced
 * resource keyed by `ctx.info.fencing` (an external effect that must exist once), and its completion carries the
 * run's next turn, run beforehand on the instance A keeps. Step k's completion is held after its activity wrote
 * the ledger and after the turn's code ran, before the fused statement is sent (`completion:before-send`); then A
 * is killed (SIGKILL). Nothing of the fused step was written, so the step's outcome is lost with A.
 *
 * Pass: the checker's zeros; step k re-run by worker B under a larger token (granted and started twice, ended
 * under B's token); the fenced store recorded the unit of work once — one ledger row, last written by B's attempt
 * with B's token, after A's (two writes accepted, in token order; A never wrote again); every other step's unit
 * recorded once by one write; the run completed with the output the flow returns without a fault; A's turns
 * after the first were fused (so the held completion was a fused one) and none of A's is left open.
 */
import { defineScenario } from '../define-scenario.js';
import type { ScenarioContext } from '../harness.js';
import { FLOW_STEPS, finishWithB, turnAttempts, waitForHeldCompletion } from './eager-flow.js';

export const fusedEffectCrash = defineScenario('T27 crash between a fused step’s effect and its record', {
  description:
    'SIGKILL a worker after a fused step’s activity wrote a fenced external effect, before the fused statement; the step re-runs elsewhere under a larger token, the effect is recorded once',
  iterations: { full: 6, ci: 2 },
  async iteration(ctx, { i }) {
    const a = await ctx.spawnWorker({ workerId: `a${i}`, fuseSteps: true });
    const k = ctx.rng.int(1, FLOW_STEPS - 1);
    const label = `t27-${i}-${ctx.rng.seed}-${ctx.rng.int(0, 1e9)}`;
    const { runId } = await ctx.startWorkflow({
      steps: FLOW_STEPS,
      iterations: 1,
      label,
      ledger: true,
      hold: { point: 'completion', step: k },
    });
    const flow = { runId, label, tags: Array.from({ length: FLOW_STEPS }, (_, s) => `${label}/step-${s}`) };
    const held = await waitForHeldCompletion(ctx, a, flow);
    const fusedBefore = a
      .all('turn:committed', (m) => m.runId === runId)
      .map((m) => m.grant)
      .slice(1);
    ctx.expect(
      fusedBefore.length === k && fusedBefore.every((g) => g === 'fused'),
      `${runId}: A's turns after the first were ${fusedBefore.join(', ') || 'none'}, want ${k} fused`,
    );
    const effectOfA = a.all(
      'chaos:op',
      (m) => m.op === 'resource-write' && m.phase === 'ok' && m.attempt.token === held.token,
    );
    ctx.expect(
      effectOfA.length === 1,
      `${runId}: A's attempt ${held.token} of step ${k} wrote the ledger ${effectOfA.length}× before its completion was held, want once`,
    );

    a.kill('SIGKILL');
    ctx.fault('sigkill between a fused step’s effect and its statement');
    await a.exited;
    const { b, steps } = await finishWithB(ctx, i, flow, 'sigkill', k, held);
    const bToken = steps[k]?.token ?? '0';
    ctx.expect(
      BigInt(bToken) > BigInt(held.token),
      `${runId}: step ${k} re-ran under token ${bToken}, want one larger than A's ${held.token}`,
    );
    await expectLedger(ctx, runId, steps, k, held.token, b.workerId);
    await expectOutput(ctx, runId, flow.tags);
    const turns = await turnAttempts(ctx, runId);
    const mine = turns.filter((t) => t.workerId === a.workerId);
    ctx.expect(
      mine.length === k + 1 && turns.every((t) => t.outcome !== null),
      `${runId}: A's turns ${mine.map((t) => t.outcome).join(', ')} (all: ${turns.map((t) => t.outcome).join(', ')}), ` +
        `want ${k + 1} and none left open (the held fused turn never granted)`,
    );
    await b.stop();
  },
});

/**
 * One ledger row per unit of work (scope `run:<id>/seq:<seq>`), under the token of the attempt that ended the step:
 * step `k` written twice (A's write, then B's, which superseded it), every other step once.
 */
async function expectLedger(
  ctx: ScenarioContext,
  runId: string,
  steps: readonly { readonly token: string; readonly workerId: string | null }[],
  k: number,
  aToken: string,
  bWorker: string,
): Promise<void> {
  const rows = await ctx.sql.unsafe<{ scope: string; token: string; worker_id: string; writes: number }[]>(
    `SELECT scope, fencing_token::text AS token, worker_id, writes FROM "${ctx.schema}".ledger
      WHERE run_id = $1 ORDER BY scope`,
    [runId],
  );
  ctx.expect(
    rows.length === FLOW_STEPS,
    `${runId}: ${rows.length} ledger rows, want ${FLOW_STEPS} (one per unit of work)`,
  );
  const seqs = await ctx.sql.unsafe<{ seq: number; token: string }[]>(
    `SELECT seq, fencing_token::text AS token FROM "${ctx.schema}".steps
      WHERE run_id = $1 AND kind = 'activity' AND retired_at IS NULL ORDER BY seq`,
    [runId],
  );
  for (const [s, step] of seqs.entries()) {
    const row = rows.find((r) => r.scope === `run:${runId}/seq:${step.seq}`);
    const want = s === k ? { writes: 2, worker: bWorker } : { writes: 1, worker: steps[s]?.workerId };
    ctx.expect(
      row !== undefined &&
        row.token === step.token &&
        row.writes === want.writes &&
        row.worker_id === want.worker &&
        (s !== k || BigInt(row.token) > BigInt(aToken)),
      `${runId}: ledger of step ${s}: ${row ? `token ${row.token} by ${row.worker_id}, ${row.writes} writes` : 'none'}, ` +
        `want token ${step.token} by ${want.worker ?? '?'}, ${want.writes} writes`,
    );
  }
}

/** The run's stored output: each step's `{ iterations: 1, tag }`, in order (jsonb reorders keys: compared by field). */
async function expectOutput(ctx: ScenarioContext, runId: string, tags: readonly string[]): Promise<void> {
  const [run] = await ctx.sql.unsafe<{ output: string | null }[]>(
    `SELECT output::text AS output FROM "${ctx.schema}".runs WHERE id = $1`,
    [runId],
  );
  const stored = JSON.parse(run?.output ?? 'null') as { iterations?: unknown; tag?: unknown }[] | null;
  const got = JSON.stringify(stored?.map((o) => ({ iterations: o.iterations, tag: o.tag })) ?? null);
  const want = JSON.stringify(tags.map((tag) => ({ iterations: 1, tag })));
  ctx.expect(got === want, `${runId}: output ${run?.output ?? 'none'}, want ${want}`);
}
