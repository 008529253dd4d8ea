/**
 * T12 — a worker stalled inside `ctx.fencedTransaction` (research/fencing-semantics.md §3.3). Worker A's
 * `chaos-loop` holds one fenced transaction open at a pause point (`chaos:pause`, with the backend pid) and A is
 * SIGSTOPped there for 2L, at one of three points:
 *
 * - (a) `before-fence`: the user's INSERT ran, the fence statement not yet;
 * - (b) `before-commit`: the fence UPDATE ran (the step's row is locked by A's open transaction), COMMIT not
 *   sent — the dangerous window, reached through the engine's `fenced-transaction:before-commit` fault hook;
 * - (c) `in-statement`: during a long user statement (`pg_sleep`), which the server finishes alone.
 *
 * In every case the connection ends up idle in its transaction while A is frozen, so the server must end the
 * session after the `idle_in_transaction_session_timeout` the fenced transaction set (max(L/3, 500 ms)), rolling
 * it back and releasing the row lock; worker B then reclaims the step once the lease expired. After SIGCONT, A's
 * fenced write must fail (it surely did not commit: COMMIT was never sent) and its INSERT must not exist.
 * Reports the session kill delay, the reclaim delay after the stop (for (b): bound timeout + L + ε) and what A's
 * code was told.
 */
import { defineScenario } from '../define-scenario.js';
import { SCHEDULING_SLACK_MS, measuredLagMs } from '../harness.js';

const POINTS = (process.env.T12_POINTS?.split(',') ?? ['before-fence', 'before-commit', 'in-statement']) as (
  'before-fence' | 'before-commit' | 'in-statement'
)[];
/** How long the activity holds at the pause point before going on (it is frozen long before that). */
const HOLD_MS = 1_500;

export const stalledFencedTransaction = defineScenario('T12 stalled fenced transaction', {
  description:
    'SIGSTOP the owner for 2L inside fencedTransaction (before the fence / before COMMIT / in a statement)',
  iterations: { full: 12, ci: 3, variants: POINTS },
  setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
  async iteration(ctx, { variant: point }, workers) {
    const { leaseMs: L, reclaimDelayMs, pollIntervalMs } = ctx.timings;
    const idleTimeoutMs = Math.max(500, Math.floor(L / 3));
    const atSeq = ctx.rng.int(0, 3);
    const { runId, stepId } = await ctx.enqueue({
      iterations: 8,
      sleepMs: 50,
      pause: { atSeq, point, ms: HOLD_MS },
    });
    const { worker: a, claim } = await ctx.waitForClaim(runId, workers);
    const b = workers.find((w) => w !== a);
    if (!b) throw new Error('T12 needs two workers');
    const token = claim.attempt.token;
    const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === token;
    const paused = await a.waitFor('chaos:pause', ofAttempt, { timeoutMs: 10_000 });
    if (point === 'in-statement') {
      // Stop A only once the server runs the statement: frozen between postgres.js's Describe and Bind, the
      // session is neither idle nor running a statement, and no server timeout below PostgreSQL 17's
      // transaction_timeout would end it (found by this scenario; see the report).
      await ctx.poll(
        'the long statement running',
        async () => {
          const rows = await ctx.sql`
              SELECT 1 FROM pg_stat_activity WHERE pid = ${paused.backendPid} AND wait_event = 'PgSleep'`;
          return rows.length > 0 ? true : undefined;
        },
        HOLD_MS,
      );
    }
    a.kill('SIGSTOP');
    const stoppedAt = Date.now();
    ctx.fault(`sigstop ${point}`);
    ctx.expect(
      stoppedAt - paused.wallMs < HOLD_MS,
      `${runId}: stopped ${stoppedAt - paused.wallMs} ms after the pause began, past its ${HOLD_MS} ms hold`,
    );

    // The server ends A's idle-in-transaction session on its own (after the user statement, in (c)).
    let seen = '';
    const killedAt = await ctx
      .poll(
        `the end of A's backend ${paused.backendPid}`,
        async () => {
          const rows = await ctx.sql<{ state: string; wait: string | null; query: string }[]>`
              SELECT state, wait_event AS wait, left(query, 80) AS query
                FROM pg_stat_activity WHERE pid = ${paused.backendPid}`;
          if (rows[0]) seen = `${rows[0].state} (wait ${rows[0].wait ?? '-'}): ${rows[0].query}`;
          return rows.length === 0 ? Date.now() : undefined;
        },
        2 * L,
      )
      .catch((error: unknown) => {
        throw new Error(`${(error as Error).message}; it was last ${seen}`);
      });
    const statementMs = point === 'in-statement' ? HOLD_MS : 0;
    const killDelay = killedAt - stoppedAt;
    ctx.sample(`sessionEndAfterStopMs ${point}`, killDelay);
    ctx.expect(
      killDelay <= statementMs + idleTimeoutMs + SCHEDULING_SLACK_MS,
      `${runId} (${point}): A's session ended ${killDelay} ms after the stop (> ${statementMs} + ${idleTimeoutMs} + ε)`,
    );

    // B reclaims while A is still frozen.
    const { claim: reclaim } = await ctx.waitForClaim(runId, [b], { notToken: token, timeoutMs: 2 * L });
    const reclaimDelay = reclaim.wallMs - stoppedAt;
    ctx.sample(`reclaimAfterStopMs ${point}`, reclaimDelay);
    // λ: B's measured event-loop lag (its poll fires late on a loaded machine); the session end above is the
    // server's alone.
    const lag = measuredLagMs([b], stoppedAt, reclaim.wallMs);
    const bound =
      statementMs + idleTimeoutMs + L + reclaimDelayMs + pollIntervalMs + lag + SCHEDULING_SLACK_MS;
    ctx.expect(
      reclaimDelay <= bound,
      `${runId} (${point}): reclaimed ${reclaimDelay} ms after the stop (> ${bound})`,
    );

    await ctx.sleepUntil(stoppedAt + 2 * L);
    a.kill('SIGCONT');
    const ended = await a.waitFor('fixture:ended', ofAttempt, { timeoutMs: 3 * L + 10_000 });
    const outcome = a.all('chaos:op', (m) => ofAttempt(m) && m.op === 'fenced-write' && m.seq === atSeq);
    const last = outcome.at(-1);
    ctx.fault(`A told: ${last?.error?.code ?? last?.error?.name ?? last?.phase ?? 'nothing'}`);
    ctx.expect(
      ended.outcome === 'threw' && last !== undefined && last.phase === 'fail',
      `${runId} (${point}): A's stalled fenced write ended ${last?.phase ?? 'without an outcome'} ` +
        `(${last?.error?.code ?? last?.error?.message ?? '-'}), want a sure failure`,
    );
    const [row] = await ctx.sql.unsafe<{ n: number }[]>(
      `SELECT count(*)::int AS n FROM "${ctx.schema}".effects
          WHERE step_id = $1 AND fencing_token = $2::bigint AND seq = $3 AND fenced`,
      [stepId, token, atSeq],
    );
    ctx.expect(row?.n === 0, `${runId} (${point}): A's stalled fenced write committed`);
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  },
});
