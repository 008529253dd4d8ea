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
 * - `heartbeat`: a lease renewal (its JSON payload names the step); A treats it as failed and goes on;
 * - `claim`: the claim statement (its SQL names `prev_deadline_at`, which no other statement does); A is stopped
 *   while the run is enqueued and the rule armed, so its next claim is the one that takes the step. The claim
 *   commits, A never learns it; the engine must settle it by its request id and release the grant unstarted
 *   (I15) — or, failing that, let it expire — and run the step once, on a later grant.
 *
 * Pass: the checker's zeros, and one grant per step (attempts/step = 1: nothing re-ran because of an ambiguous
 * outcome; the lease never expired since L is far longer than the fault). For `claim`: two grants (the
 * ambiguous one, released unstarted, and the one that ran), the activity started once.
 */
import { readGrants } from '../checker.js';
import { defineScenario } from '../define-scenario.js';
import type { ScenarioContext } from '../harness.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';
import { spawnBehindProxy } from '../proxy-faults.js';
import type { WorkerProcess } from '../../support/worker-process.js';

const KINDS = ['fenced-transaction', 'completion', 'heartbeat', 'claim'] as const;
/** Text only the claim statement (queries/claim-steps.ts) carries on the wire. */
const CLAIM_MARKER = 'prev_deadline_at';

export const lostCommitAck = defineScenario('T6 lost commit ack', {
  description:
    'drop the server’s reply to a committed fenced transaction / completion / heartbeat / claim, then reset',
  iterations: { full: 16, ci: 4, variants: KINDS },
  setup: (ctx) => spawnBehindProxy(ctx, { workerId: 'a', unprepared: true }),
  async iteration(ctx, { i, variant: kind }, { proxy, worker: a }) {
    const L = ctx.timings.leaseMs;
    const count = async (query: string, params: (string | number)[]): Promise<number> => {
      const [row] = await ctx.sql.unsafe<{ n: number }[]>(query, params);
      return row?.n ?? 0;
    };
    if (kind === 'claim') {
      await lostClaimAck(ctx, proxy, a);
      return;
    }
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
        count(`SELECT count(*)::int AS n FROM "${ctx.schema}".runs WHERE id = $1 AND status = 'completed'`, [
          runId,
        ]),
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
      return;
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
  },
});

/** How often the claim case is tried again when a claim A had in flight before the rule took the step. */
const CLAIM_TRIES = 3;

/**
 * A claim commits on the server and its reply is lost: released unstarted (or expired), the step runs once.
 *
 * A claim A described before it stopped (its Parse sent, its execution not) runs when A resumes, without the marker
 * the rule waits for: it may take the step, and the rule then trips on a later claim. That is not the fault this
 * case is for, and A's announcement of the grant, stamped before the rule tripped, shows it: the case is tried
 * again with a new run, up to {@link CLAIM_TRIES} times.
 */
async function lostClaimAck(ctx: ScenarioContext, proxy: TcpProxy, a: WorkerProcess): Promise<void> {
  for (let attempt = 1; attempt <= CLAIM_TRIES; attempt++) {
    if ((await lostClaimAckOnce(ctx, proxy, a)) === 'done') return;
    ctx.fault('claim: the step was taken by a claim A had in flight before the rule; tried again');
  }
  ctx.expect(false, `claim: ${CLAIM_TRIES} times a claim in flight before the rule took the step`);
}

async function lostClaimAckOnce(
  ctx: ScenarioContext,
  proxy: TcpProxy,
  a: WorkerProcess,
): Promise<'done' | 'missed'> {
  const L = ctx.timings.leaseMs;
  // Stopped, A cannot claim the step before the rule is armed; resumed, its next claim takes it.
  a.kill('SIGSTOP');
  let run: { runId: string; stepId: string };
  let rule: ReturnType<TcpProxy['dropReplyAfter']>;
  try {
    run = await ctx.enqueue({ iterations: 8 });
    rule = proxy.dropReplyAfter(CLAIM_MARKER, { fromNextRequest: true });
  } finally {
    a.kill('SIGCONT');
  }
  const { runId, stepId } = run;
  let trippedAtWallMs = Infinity;
  const connection = await Promise.race([
    rule.tripped.then((id) => {
      trippedAtWallMs = Date.now();
      return id;
    }),
    new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000).unref()),
  ]);
  if (connection === undefined) {
    proxy.restore();
    ctx.expect(false, `${runId} (claim): A sent no claim within 10 s`);
    await ctx.waitForRunEnd(runId, 10 * L + 20_000);
    return 'done';
  }
  ctx.fault('reply dropped: claim');
  const granted = async (): Promise<true | undefined> =>
    (await readGrants(ctx.sql, ctx.schema, stepId)).length > 0 ? true : undefined;
  const committed = await ctx
    .poll('the claim with the dropped reply committed', granted, 5_000)
    .catch(() => false);
  ctx.fault(`claim: ${committed ? 'committed' : 'not committed'} when the connection died`);
  proxy.restore();
  proxy.resetConnection(connection);

  const status = await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  ctx.expect(status === 'completed', `${runId} (claim): run ${status}, want completed`);
  const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).filter((g) => !g.revoke);
  const claims = a.all('attempt:claimed', (m) => m.attempt.runId === runId);
  const first = grants[0];
  if (first && claims.some((m) => m.attempt.token === first.token.toString() && m.wallMs <= trippedAtWallMs))
    return 'missed';
  const announced = new Set(claims.map((m) => m.attempt.token));
  const unannounced = grants.filter((g) => !announced.has(g.token.toString()));
  const started = a.all('fixture:started', (m) => m.attempt.runId === runId);
  ctx.sample('attemptsPerStep claim', grants.length);
  ctx.expect(started.length === 1, `${runId} (claim): the activity started ${started.length} times, want 1`);
  ctx.expect(
    unannounced.length === (committed ? 1 : 0),
    `${runId} (claim): ${unannounced.length} grants A never learnt of, want ${committed ? 1 : 0}`,
  );
  for (const g of unannounced) {
    const [row] = await ctx.sql.unsafe<{ outcome: string | null }[]>(
      `SELECT outcome FROM "${ctx.schema}".attempts WHERE fencing_token = $1::bigint`,
      [g.token.toString()],
    );
    const outcome = row?.outcome ?? 'none';
    ctx.fault(`claim: ambiguous grant ${outcome === 'released' ? 'released unstarted' : outcome}`);
    ctx.expect(
      outcome === 'released' || outcome === 'lease_expired',
      `${runId} (claim): the ambiguous grant ended ${outcome}, want released (or lease_expired)`,
    );
  }
  return 'done';
}
