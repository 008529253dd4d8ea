/**
 * T7 — a network partition between the owner and the database (research/fencing-semantics.md §3.3). Each
 * worker reaches PostgreSQL through its own TCP proxy; the owner's proxy blackholes both directions for
 * d = 0.45L (shorter than half a lease) or d = 2.2L (longer than two leases); bytes sent meanwhile wait, as TCP
 * retransmission would deliver them.
 *
 * - d = 0.45L: a cut shorter than the lease the last heartbeat left is invisible to the lease: no abort, no
 *   expiry, no reclaim; attempt 1 ends by its own outcome. This holds when d < L(1 − ρ) − M − H (the last
 *   heartbeat that got through may be up to H old when the cut starts), so the scenario uses H = L/12 and
 *   M = 0.2L. A fenced transaction open at the cut is ended by the server's idle_in_transaction_session_timeout
 *   (L/3) and the activity fails and is retried: counted and reported, not a lease expiry.
 * - d = 2.2L: the owner must abort on its local deadline, on its own clock and with no word from the database,
 *   *before* the database lets the lease expire. The abort lead = DB expiry (host clock) − abort (host clock);
 *   on one host `Date.now()` and `clock_timestamp()` read the same clock, so it is exact. It must be > 0 in
 *   every run; the other worker reclaims after the expiry.
 */
import type { WorkerProcess } from '../../support/worker-process.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';
import { spawnBehindProxy } from '../proxy-faults.js';
import { leaseExpiryMs, readGrants } from '../checker.js';
import { defineScenario } from '../define-scenario.js';

const CUT_FACTORS = [0.45, 2.2] as const;

export const partition = defineScenario('T7 partition', {
  description:
    'blackhole the owner↔DB link for 0.45L (nothing happens) and 2.2L (abort before the DB expiry)',
  iterations: { full: 12, ci: 2, variants: CUT_FACTORS },
  timings: { leaseMs: 3_000, heartbeatIntervalMs: 250, heartbeatTimeoutMs: 250, leaseSafetyMarginMs: 600 },
  async setup(ctx) {
    const links = new Map<WorkerProcess, TcpProxy>();
    for (const id of ['a', 'b']) {
      const { proxy, worker } = await spawnBehindProxy(ctx, { workerId: `t7-${id}` });
      links.set(worker, proxy);
    }
    return links;
  },
  async iteration(ctx, { variant: factor }, links) {
    const L = ctx.timings.leaseMs;
    const workers = [...links.keys()];
    // ~60 × (two writes + 50 ms) ≈ 4 s of work: the cut always lands inside the loop.
    const { runId, stepId } = await ctx.enqueue({ iterations: 60, sleepMs: 50 });
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
    const token = claim.attempt.token;
    const link = links.get(a) as TcpProxy;
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === token;
    await a.waitFor('fixture:started', ofAttempt, { timeoutMs: 10_000 });
    await ctx.sleepUntil(Date.now() + ctx.rng.int(100, 600));

    link.blackhole();
    const cutAt = Date.now();
    ctx.fault(`blackhole ${factor}L`);
    if (factor < 1) {
      await ctx.sleepUntil(cutAt + factor * L);
      link.restore();
      await ctx.waitForRunEnd(runId, 10 * L + 20_000);
      ctx.expect(
        a.all('attempt:aborted', ofAttempt).length === 0,
        `${runId}: aborted during a ${factor}L cut`,
      );
      // No expiry, no reclaim: attempt 1 ended by its own recorded outcome, not by another grant.
      const [last] = await ctx.sql.unsafe<{ status: string }[]>(
        `SELECT status FROM "${ctx.schema}".audit WHERE step_id = $1 AND fencing_token = $2::bigint
            ORDER BY id DESC LIMIT 1`,
        [stepId, token],
      );
      ctx.expect(
        last !== undefined && last.status !== 'running',
        `${runId}: attempt 1's lease ended by expiry during a ${factor}L cut`,
      );
      const ended = a.all('fixture:ended', ofAttempt)[0];
      if (ended?.outcome === 'threw') {
        // A fenced transaction open when the cut began sits idle in transaction on the server, which ends
        // the session after idle_in_transaction_session_timeout (L/3, I16); the activity gives up on the
        // error. Its retry is the at-least-once cost of that timeout, not a lease expiry: counted.
        ctx.fault(
          `activity failed: ${ended.error?.code ?? ended.error?.name ?? 'error'} in a ${factor}L cut`,
        );
      } else {
        const grants = await readGrants(ctx.sql, ctx.schema, stepId);
        ctx.expect(grants.length === 1, `${runId}: ${grants.length} grants after a ${factor}L cut`);
        ctx.expect(
          a.all('attempt:completed', (m) => ofAttempt(m) && m.attempt.attempt === 1).length === 1,
          `${runId}: attempt 1 did not complete after a ${factor}L cut`,
        );
      }
      return;
    }

    // d = 2.2L: A aborts on its own; the other worker reclaims once the database lets the lease expire.
    const aborted = await a.waitFor('attempt:aborted', ofAttempt, { timeoutMs: 2 * L + 10_000 });
    ctx.expect(
      aborted.reason === 'lease-expired-locally',
      `${runId}: cut-off owner aborted with ${aborted.reason}, not lease-expired-locally`,
    );
    const { worker: b, claim: reclaim } = await ctx.waitForClaim(runId, workers, {
      notToken: token,
      timeoutMs: 3 * L + 10_000,
    });
    await ctx.sleepUntil(cutAt + factor * L);
    link.restore();
    ctx.expect(b !== a, `${runId}: reclaimed by the cut-off worker itself`);
    const expiryMs = await leaseExpiryMs(ctx.sql, ctx.schema, stepId, token);
    if (expiryMs === undefined) {
      ctx.expect(false, `${runId}: no recorded lease expiry for token ${token}`);
    } else {
      const lead = expiryMs - aborted.wallMs;
      ctx.sample('abortLeadMs', lead);
      ctx.expect(lead > 0, `${runId}: aborted ${Math.round(-lead)} ms AFTER the DB expiry (lead ≤ 0)`);
      ctx.expect(
        reclaim.wallMs >= expiryMs - 50,
        `${runId}: reclaimed at ${reclaim.wallMs}, before the DB expiry ${Math.round(expiryMs)}`,
      );
    }
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  },
});
