/**
 * T5 — backend termination (research/fencing-semantics.md §3.3). `pg_terminate_backend` ends one of worker A's
 * sessions while a statement of A is in flight, for each operation kind:
 *
 * - `claim`: A is stopped (SIGSTOP), a run is enqueued, and an admin holds the next grant of a token to its step
 *   (../backend-faults.ts `lockRow('grants')`: a trigger, installed in setup, that waits on the admin's advisory
 *   lock); A resumes, and its claim statement locks the step and waits there, in its grant — terminated there (a
 *   claim never waits on a row lock: it skips locked steps and runs);
 * - `heartbeat`: the step's row is locked while the activity runs; the lease renewal waits on it — terminated;
 * - `completion`: the run's row is locked while the activity runs; the completion (which ends the run too)
 *   waits on it — terminated;
 * - `fenced-transaction`: the chaos activity holds a fenced transaction after its fence UPDATE, before COMMIT
 *   (`pause: before-commit`, reporting its backend pid), and that backend is terminated.
 *
 * A's sessions are told apart by `application_name=chaos-t5-a` in A's URL (the engine keeps it); the victim is
 * the one backend of A waiting on the admin's lock with the operation's SQL. Each termination leaves A with an
 * operation whose outcome it cannot know from its connection; the engine settles it (ambiguous claim: looked up
 * by request id; fenced transaction: `txid_status`; heartbeat and completion: retried, idempotent by nonce).
 *
 * Pass: the checker's zeros (C-ack, C-terminal, …), every run completed, A never crashed, and a step's activity
 * ran more than once only when a fenced transaction's failure reached it (attempts per step are reported).
 */
import type postgres from '@palisade/engine/postgres';
import {
  COMPLETION_STATEMENT,
  installGrantHold,
  lockRow,
  waitingBackend,
  withApplicationName,
} from '../backend-faults.js';
import { readGrants } from '../checker.js';
import { defineScenario } from '../define-scenario.js';
import type { ScenarioContext } from '../harness.js';

const KINDS = ['claim', 'heartbeat', 'completion', 'fenced-transaction'] as const;
type Kind = (typeof KINDS)[number];
const APPLICATION_NAME = 'chaos-t5-a';

/** A distinctive fragment of each statement, as `pg_stat_activity.query` shows it. */
const STATEMENT: Record<Exclude<Kind, 'fenced-transaction'>, string> = {
  claim: '%prev_deadline_at%',
  heartbeat: '%jsonb_to_recordset%renewed AS%',
  completion: COMPLETION_STATEMENT,
};

/** Terminate the backend of A that waits on a lock running `pattern`; resolves with its pid. */
function terminateWaiting(ctx: ScenarioContext, pattern: string, timeoutMs: number): Promise<number> {
  return waitingBackend(ctx, { applicationName: APPLICATION_NAME, pattern, terminate: true, timeoutMs });
}

export const backendTermination = defineScenario('T5 backend termination', {
  description: 'pg_terminate_backend on A’s session mid-claim / heartbeat / completion / fenced transaction',
  iterations: { full: 16, ci: 4, variants: KINDS },
  async setup(ctx) {
    // Before A can be frozen: the hold's trigger is DDL, which would wait on a transaction A froze in.
    await installGrantHold(ctx);
    const a = await ctx.spawnWorker({
      databaseUrl: withApplicationName(ctx.databaseUrl, APPLICATION_NAME),
      workerId: 'a',
    });
    const [seen] = await ctx.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = ${APPLICATION_NAME}`;
    ctx.expect((seen?.n ?? 0) > 0, `no backend carries application_name ${APPLICATION_NAME}`);
    return a;
  },
  async iteration(ctx, { variant: kind }, a) {
    const { leaseMs: L, heartbeatIntervalMs: H } = ctx.timings;
    const pauseAt = ctx.rng.int(1, 4);
    const input = {
      // Long enough that the run's row is locked (≤ 200 ms after the claim) well before the code returns, so
      // the completion always meets the lock (3–8 iterations raced it under load: no backend to terminate).
      iterations: kind === 'completion' ? ctx.rng.int(10, 16) : 12,
      ...(kind === 'fenced-transaction'
        ? { pause: { atSeq: pauseAt, point: 'before-commit' as const, ms: 300 } }
        : {}),
    };
    const from = a.mark();
    let lock: { release(): Promise<void> } | undefined;
    let run: { runId: string; stepId: string };
    if (kind === 'claim') {
      // A must not claim the step before its grant is held: stop it across the enqueue.
      a.kill('SIGSTOP');
      try {
        run = await ctx.enqueue(input);
        lock = await lockRow(ctx, 'grants', run.stepId);
      } finally {
        a.kill('SIGCONT');
      }
    } else {
      run = await ctx.enqueue(input);
    }
    const { runId, stepId } = run;

    try {
      if (kind === 'claim') {
        await terminateWaiting(ctx, STATEMENT.claim, 5_000);
      } else if (kind === 'fenced-transaction') {
        const pause = await a.waitFor('chaos:pause', (m) => m.attempt.runId === runId, {
          after: from,
          timeoutMs: 10_000,
        });
        const pid = pause.backendPid;
        const [row] = await ctx.sql<{ ok: boolean }[]>`SELECT pg_terminate_backend(${pid}) AS ok`;
        ctx.expect(
          row?.ok === true,
          `${runId}: backend ${pid} of the paused fenced transaction not terminated`,
        );
      } else {
        const { claim } = await ctx.waitForClaim(runId, [a]);
        await ctx.sleepUntil(claim.wallMs + ctx.rng.int(50, kind === 'heartbeat' ? 600 : 200));
        lock = await lockRow(
          ctx,
          kind === 'heartbeat' ? 'steps' : 'runs',
          kind === 'heartbeat' ? stepId : runId,
        );
        await terminateWaiting(ctx, STATEMENT[kind], 4 * H + 5_000);
      }
      ctx.fault(`terminated: ${kind}`);
    } catch (error) {
      ctx.fault(`${kind}: no backend to terminate`);
      ctx.expect(false, `${runId} (${kind}): ${(error as Error).message}`);
    } finally {
      await lock?.release();
    }

    const status = await ctx.waitForRunEnd(runId, 10 * L + 20_000);
    ctx.expect(status === 'completed', `${runId} (${kind}): run ${status}, want completed`);
    const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).filter((g) => !g.revoke);
    const claims = a.all('attempt:claimed', (m) => m.attempt.runId === runId);
    const started = a.all('fixture:started', (m) => m.attempt.runId === runId);
    ctx.sample(`attemptsPerStep ${kind}`, grants.length);
    ctx.fault(
      `${kind}: ${await resolution(ctx.sql, ctx.schema, kind, { runId, grants, claims, started, pauseAt })}`,
    );
    if (kind === 'heartbeat' || kind === 'completion') {
      // A lost renewal or completion is retried; the lease (L) outlives the fault, so nothing re-runs.
      ctx.expect(grants.length === 1, `${runId} (${kind}): ${grants.length} grants, want 1 (nothing re-run)`);
    }
    if (kind === 'fenced-transaction') {
      // The rolled-back transaction fails attempt 1 (its error now surely means "not committed"); attempt 2 runs clean.
      ctx.expect(grants.length <= 2, `${runId} (${kind}): ${grants.length} grants, want ≤ 2`);
    }
    if (kind === 'claim') {
      ctx.expect(
        started.length === 1,
        `${runId} (claim): the activity started ${started.length} times, want 1`,
      );
    }
  },
  finish(ctx, a) {
    ctx.expect(a.all('process:fatal').length === 0, 'worker A crashed');
    ctx.expect(!a.all('worker:stopped').length, 'worker A stopped during the scenario');
  },
});

/** How the engine settled the operation whose session was terminated. */
async function resolution(
  sql: postgres.Sql,
  schema: string,
  kind: Kind,
  o: {
    runId: string;
    grants: readonly { token: bigint }[];
    claims: readonly { attempt: { token: string } }[];
    started: readonly unknown[];
    pauseAt: number;
  },
): Promise<string> {
  const first = o.grants[0];
  if (kind === 'claim') {
    // A grant A never announced is the terminated claim, committed after all.
    const announced = new Set(o.claims.map((c) => c.attempt.token));
    const unannounced = o.grants.filter((g) => !announced.has(g.token.toString()));
    return unannounced.length > 0 ? 'committed (released or expired unstarted)' : 'rolled back';
  }
  if (kind === 'fenced-transaction') {
    if (!first) return 'no grant';
    const [row] = await sql.unsafe<{ n: number }[]>(
      `SELECT count(*)::int AS n FROM "${schema}".effects
        WHERE fencing_token = $1::bigint AND seq = $2 AND fenced`,
      [first.token.toString(), o.pauseAt],
    );
    return (row?.n ?? 0) > 0 ? 'committed' : 'rolled back';
  }
  return o.grants.length === 1 ? 'rolled back, retried' : 'expired';
}
