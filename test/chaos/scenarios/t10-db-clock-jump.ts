/**
 * T10 — the database clock jumps (research/fencing-semantics.md §3.3; assumption A3: no DB clock step). While
 * worker A holds a `chaos-loop` lease and writes, the engine's time `<schema>.now()` is jumped forward by J
 * (test-only time travel: the offset row `advanceClock` moves). J cycles through M/2, M, 2M and 1.5L.
 *
 * - Always: fencing needs no clock assumption, so every checker stays 0 (C-stale-fenced above all: a fenced
 *   write of A after its lease expired in engine time is rejected by the fence, whatever the host clock says).
 *   The checker judges leases in engine time, so B's reclaim after a large jump is not an overlap.
 * - J ≤ M: A's lease still has at least L − H − J − (heartbeat round trip) left, its next heartbeat renews it:
 *   no expiry, no reclaim, no unfenced write after the DB's expiry. Asserted.
 * - J > M (2M, 1.5L): A's local deadline (its monotonic clock, which did not jump) may now lie after the DB's
 *   expiry: A's unfenced writes between the jump and its abort are exposed (assumption A3 broken). Reported per J
 *   (`dbJumpExposure:…`), with the window from the DB's expiry to A's stop (`dbJumpWindowMs:…`), in the
 *   figures rows "… after a DB clock jump, by J"; not asserted. For 1.5L the lease is gone the moment the jump
 *   commits: A's next heartbeat or fenced write is rejected and its signal must fire. Since `chaos-loop` does a
 *   fenced write before each unfenced one, the fence usually stops A first and the exposure is 0–1 writes: the
 *   window is what a loop of unfenced writes alone would have been exposed for.
 */
import { advanceClock } from '@palisade/engine/testing';
import { leaseExpiryMs } from '../checker.js';
import { defineScenario } from '../define-scenario.js';
import type { ScenarioContext } from '../harness.js';

/** M for this scenario (the engine's default for L = 2 s would be L/3 − 1 ms; a round value reads better). */
const MARGIN_MS = 600;

/** The jumps J the iterations cycle through (ms, given the scenario's lease L). */
const JUMPS = [
  { label: 'M/2', ms: () => MARGIN_MS / 2 },
  { label: 'M', ms: () => MARGIN_MS },
  { label: '2M', ms: () => 2 * MARGIN_MS },
  { label: '1.5L', ms: (L: number) => 1.5 * L },
] as const;

export const dbClockJump = defineScenario('T10 DB clock jump', {
  description:
    'jump the engine’s DB clock forward by M/2, M, 2M, 1.5L mid-lease; fencing holds, J ≤ M exposes nothing',
  iterations: { full: 24, ci: 4, variants: JUMPS },
  timings: { leaseSafetyMarginMs: MARGIN_MS },
  setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
  async iteration(ctx, { variant }, workers) {
    const { leaseMs: L } = ctx.timings;
    const jump = { label: variant.label, ms: variant.ms(L) };
    // ~40 × (two writes + 50 ms) ≈ 2.5 s of work: the jump always lands inside the loop.
    const { runId, stepId } = await ctx.enqueue({ iterations: 40, sleepMs: 50 });
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
    const token = claim.attempt.token;
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === token;
    await a.waitFor('fixture:started', ofAttempt, { timeoutMs: 10_000 });
    await ctx.sleepUntil(Date.now() + ctx.rng.int(50, 1_000));

    await advanceClock(ctx.engine, jump.ms);
    ctx.fault(`db clock +${jump.label}`);
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);

    const { grants, exposed } = await exposure(ctx, stepId, token);
    const key = `J=${jump.label} (${jump.ms} ms)`;
    ctx.sample(`dbJumpExposure:${key}`, exposed);
    // How long A went on after the DB ended its lease (host clock): 0 when the lease never expired.
    const ended = await a.waitFor('fixture:ended', ofAttempt, { timeoutMs: 10_000 });
    const signal = a.all('chaos:op', (m) => ofAttempt(m) && m.op === 'signal')[0];
    const expiryMs = await leaseExpiryMs(ctx.sql, ctx.schema, stepId, token);
    const stoppedAt = Math.min(ended.wallMs, signal?.wallMs ?? Infinity);
    const lostLease = grants > 1 || a.all('attempt:completed', ofAttempt).length === 0;
    ctx.sample(
      `dbJumpWindowMs:${key}`,
      lostLease && expiryMs !== undefined ? Math.max(0, stoppedAt - expiryMs) : 0,
    );
    if (jump.ms <= MARGIN_MS) {
      ctx.expect(
        exposed === 0,
        `${runId}: ${exposed} unfenced writes after the DB expiry, J = ${jump.label}`,
      );
      ctx.expect(grants === 1, `${runId}: reclaimed (${grants} grants) after a jump of only ${jump.label}`);
      ctx.expect(
        a.all('attempt:aborted', ofAttempt).length === 0,
        `${runId}: A aborted after a jump of only ${jump.label}`,
      );
    } else if (jump.ms > L) {
      ctx.expect(
        signal !== undefined || ended.outcome === 'returned',
        `${runId}: A's signal never fired although its lease ended with a ${jump.label} jump`,
      );
      ctx.expect(
        a.all('attempt:completed', ofAttempt).length === 0,
        `${runId}: A's completion was accepted after its lease ended with a ${jump.label} jump`,
      );
    }
  },
});

/**
 * Grants of the step, and unfenced writes of `token` committed (engine time) at or after the token went stale:
 * superseded by the next grant or past its last lease expiry.
 */
async function exposure(
  ctx: ScenarioContext,
  stepId: string,
  token: string,
): Promise<{ grants: number; exposed: number }> {
  const s = `"${ctx.schema}"`;
  const [row] = await ctx.sql.unsafe<{ grants: number; exposed: number }[]>(
    `WITH stale AS (
       SELECT least(
                (SELECT min(engine_at) FROM ${s}.audit
                  WHERE step_id = $1 AND fencing_token > $2::bigint),
                (SELECT max(lease_expires_at) FROM ${s}.audit
                  WHERE step_id = $1 AND fencing_token = $2::bigint AND status = 'running')) AS since)
     SELECT (SELECT count(DISTINCT fencing_token)::int FROM ${s}.audit
              WHERE step_id = $1 AND fencing_token IS NOT NULL) AS grants,
            (SELECT count(*)::int FROM ${s}.effects, stale
              WHERE step_id = $1 AND fencing_token = $2::bigint AND NOT fenced
                AND engine_time >= stale.since) AS exposed`,
    [stepId, token],
  );
  return { grants: row?.grants ?? 0, exposed: row?.exposed ?? 0 };
}
