/**
 * T6 — a lost commit acknowledgement (research/fencing-semantics.md §3.3). Worker A reaches PostgreSQL through its
 * own TCP proxy; the proxy forwards one operation of A to the server and drops the server's reply
 * (`dropReplyAfter`), then — once the server has committed it — destroys that connection, as a network failure
 * after the commit would. The operation's outcome is unknown to A, for each kind:
 *
 * - `fenced-transaction`: the COMMIT of a `ctx.fencedTransaction` (A runs with `prepare=false`, so every COMMIT
 *   is sent as text and the marker `\0commit\0` finds it); the engine must settle it as committed (by xid) and
 *   give the activity its result — no error, no re-run;
 * - `completion`: the completion statement (its output carries a unique tag); the engine must retry it and
 *   find its own completion (idempotent by nonce) — the step is not run again;
 * - `heartbeat`: a lease renewal (its JSON payload names the step); A treats it as failed and goes on.
 *
 * Pass: the checker's zeros, and one grant per step (attempts/step = 1: nothing re-ran because of an ambiguous
 * outcome; the lease never expired since L is far longer than the fault).
 */
import { readGrants } from '../checker.js';
import type { Scenario } from '../harness.js';

const KINDS = ['fenced-transaction', 'completion', 'heartbeat'] as const;

export const lostCommitAck: Scenario = {
  name: 'T6 lost commit ack',
  description:
    'drop the server’s reply to a committed fenced transaction / completion / heartbeat, then reset',
  iterations: { full: 15, ci: 3 },
  async run(ctx, iterations) {
    const L = ctx.timings.leaseMs;
    const proxy = await ctx.proxy();
    const url = new URL(proxy.url(ctx.databaseUrl));
    url.searchParams.set('prepare', 'false');
    const a = await ctx.spawnWorker({ databaseUrl: url.toString(), workerId: 'a' });
    const count = async (query: string, params: (string | number)[]): Promise<number> => {
      const [row] = await ctx.sql.unsafe<{ n: number }[]>(query, params);
      return row?.n ?? 0;
    };
    for (let i = 0; i < iterations; i++) {
      const kind = KINDS[i % KINDS.length] ?? 'completion';
      const tag = `t6-${ctx.rng.seed}-${i}-${ctx.rng.int(0, 1e9)}`;
      const { runId, stepId } = await ctx.enqueue({ iterations: kind === 'completion' ? 8 : 12, tag });
      const { claim } = await ctx.waitForClaim(runId, [a]);
      const token = claim.attempt.token;
      const ofAttempt = (m: { attempt: { token: string } }): boolean => m.attempt.token === token;

      // What the server holds of this attempt before the fault, to see the dropped operation commit.
      const evidence = {
        'fenced-transaction': () =>
          count(
            `SELECT count(*)::int AS n FROM "${ctx.schema}".effects WHERE fencing_token = $1::bigint AND fenced`,
            [token],
          ),
        completion: () =>
          count(
            `SELECT count(*)::int AS n FROM "${ctx.schema}".runs WHERE id = $1 AND status = 'completed'`,
            [runId],
          ),
        heartbeat: () =>
          count(
            `SELECT count(*)::int AS n FROM "${ctx.schema}".audit WHERE step_id = $1 AND fencing_token = $2::bigint`,
            [stepId, token],
          ),
      }[kind];
      let marker: string;
      if (kind === 'fenced-transaction') {
        await a.waitFor('chaos:op', (m) => ofAttempt(m) && m.op === 'fenced-write' && m.phase === 'ok', {
          timeoutMs: 10_000,
        });
        marker = '\0commit\0';
      } else if (kind === 'completion') {
        marker = tag;
      } else {
        marker = `"id":"${stepId}"`;
      }
      const before = await evidence();
      const rule = proxy.dropReplyAfter(marker);
      const connection = await Promise.race([
        rule.tripped,
        a.waitFor('attempt:completed', ofAttempt, { timeoutMs: 20_000 }).then(() => undefined),
      ]);
      if (connection === undefined) {
        proxy.restore();
        ctx.fault(`${kind}: the step ended before the fault`);
        await ctx.waitForRunEnd(runId, 10 * L + 20_000);
        continue;
      }
      ctx.fault(`reply dropped: ${kind}`);
      // The server committed what it received (bounded polling), then the connection dies.
      const committed = await ctx
        .poll(`the ${kind} with the dropped reply committed`, async () =>
          (await evidence()) > before ? true : undefined,
        )
        .catch(() => false);
      ctx.fault(`${kind}: ${committed ? 'committed' : 'not committed'} when the connection died`);
      proxy.restore();
      proxy.resetConnection(connection);

      await ctx.waitForRunEnd(runId, 10 * L + 20_000);
      const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).filter((g) => !g.revoke);
      ctx.sample(`attemptsPerStep ${kind}`, grants.length);
      ctx.expect(grants.length === 1, `${runId} (${kind}): ${grants.length} grants, want 1 (nothing re-run)`);
      // The run may be completed in the database before A, retrying on a new connection, learns it.
      const acknowledged = await a
        .waitFor('attempt:completed', ofAttempt, { timeoutMs: 2 * L + 10_000 })
        .then(() => true)
        .catch(() => false);
      ctx.expect(acknowledged, `${runId} (${kind}): A never saw its completion acknowledged`);
      const uncertain = a.all('chaos:op', (m) => ofAttempt(m) && m.phase !== 'invoke' && m.phase !== 'ok');
      ctx.expect(
        uncertain.length === 0 || kind === 'heartbeat',
        `${runId} (${kind}): the activity was told ${uncertain.map((m) => `${m.op} ${m.phase}`).join(', ')}`,
      );
    }
  },
};
