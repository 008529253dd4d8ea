/**
 * T9 — worker clock skew (research/fencing-semantics.md §3.3). Three workers with wrong clocks, injected by a
 * preload (test/support/clock-skew.ts; libfaketime is not installed, and would not reach libuv's monotonic
 * clock anyway): `Date` at +1 h with `performance.now()` 1 % fast, `Date` at −1 h with it 1 % slow, and an exact
 * clock. Each iteration enqueues three `chaos-loop` runs (each worker, at concurrency 1, claims one) and injects
 * one fault into the owner of one of them, rotating over the skews: SIGSTOP for 2L, SIGKILL (a replacement with
 * the same skew is spawned), or none.
 *
 * Leases and due times are judged by the database, so the behaviour must be that of no skew: every checker 0;
 * no false expiry (a run whose owner got no fault is granted exactly once, completed by its owner, which never
 * aborted); every lease the database set (claims and heartbeats) is `<schema>.now()` + L, whatever the worker's
 * clock; a killed owner's step is reclaimed within L + reclaim delay (or, if later, once a worker has a free
 * slot: each runs one activity at a time) + poll + λ (the workers' measured event-loop lag) + ε; a frozen owner never gets its completion accepted. A rate error of 1 % is ten times the declared ρ (0.001) but within the margin M.
 */
import type { WorkerClockSkew, WorkerProcess } from '../../support/worker-process.js';
import { readGrants } from '../checker.js';
import { defineScenario } from '../define-scenario.js';
import {
  SCHEDULING_SLACK_MS,
  firstFreeSlotMs,
  measuredLagMs,
  type EnqueuedRun,
  type ScenarioContext,
} from '../harness.js';

const HOUR_MS = 3_600_000;
const SKEWS = [
  { id: '+1h fast', clock: { offsetMs: HOUR_MS, rate: 1.01 } },
  { id: '-1h slow', clock: { offsetMs: -HOUR_MS, rate: 0.99 } },
  { id: 'exact', clock: { offsetMs: 0, rate: 1 } },
] as const satisfies readonly { readonly id: string; readonly clock: WorkerClockSkew }[];
const FAULTS = ['sigstop 2L', 'sigkill', 'none'] as const;

type Skew = (typeof SKEWS)[number];

const spawn = (ctx: ScenarioContext, skew: Skew, n: number): Promise<WorkerProcess> =>
  ctx.spawnWorker({ workerId: `t9 ${skew.id} #${n}`, clock: skew.clock });

export const workerClock = defineScenario('T9 worker clock skew', {
  description: 'workers at +1h/1.01, −1h/0.99 and exact, with SIGSTOP/SIGKILL mixed in: as if no skew',
  iterations: { full: 18, ci: 3, variants: SKEWS },
  async setup(ctx) {
    const skewOf = new Map<WorkerProcess, Skew>();
    let spawned = 0;
    for (const skew of SKEWS) skewOf.set(await spawn(ctx, skew, ++spawned), skew);
    return { skewOf, spawned };
  },
  async iteration(ctx, { i, variant: victimSkew }, state) {
    const { leaseMs: L, reclaimDelayMs, pollIntervalMs } = ctx.timings;
    const { skewOf } = state;
    const fault = FAULTS[(i + Math.floor(i / SKEWS.length)) % FAULTS.length] ?? 'none';
    const workers = [...skewOf.keys()];
    // ~40 × (two writes + 50 ms) ≈ 2.5 s > L: every owner heartbeats on its skewed clock.
    const runs: EnqueuedRun[] = [];
    for (let r = 0; r < SKEWS.length; r++) runs.push(await ctx.enqueue({ iterations: 40, sleepMs: 50 }));
    const claims = await Promise.all(runs.map((run) => ctx.waitForClaim(run.runId, workers)));
    for (const { worker } of claims) ctx.fault(`owner clock ${skewOf.get(worker)?.id ?? '?'}`);
    const victim = claims.find((c) => skewOf.get(c.worker) === victimSkew) ?? claims[0];
    if (!victim) throw new Error('no claim');
    const a = victim.worker;
    const ofVictim = (m: { attempt: { token: string } }): boolean =>
      m.attempt.token === victim.claim.attempt.token;

    if (fault !== 'none') {
      await ctx.sleepUntil(victim.claim.wallMs + ctx.rng.int(50, 1_200));
      ctx.fault(`${fault} (owner clock ${victimSkew.id})`);
    }
    if (fault === 'sigkill') {
      a.kill('SIGKILL');
      const killedAt = Date.now();
      await a.exited;
      skewOf.delete(a);
      skewOf.set(await spawn(ctx, victimSkew, ++state.spawned), victimSkew);
      await ctx.waitForRunEnd(victim.claim.attempt.runId, 10 * L + 20_000);
      const next = (await readGrants(ctx.sql, ctx.schema, victim.claim.attempt.stepId)).find(
        (g) => g.token > BigInt(victim.claim.attempt.token),
      );
      if (next) {
        const latency = next.atMs - killedAt;
        ctx.sample('reclaimLatencyMs', latency);
        // λ: the event-loop lag the workers really had meanwhile (as T8's bound): a poll timer that fires late on a
        // loaded machine claims late by as much, whatever the clocks say.
        const lag = measuredLagMs(skewOf.keys(), killedAt, next.atMs);
        // A worker at concurrency 1 can claim only once its slot is free: the survivors may still run their own
        // runs (longer than planned on a loaded machine) and the replacement must first start. The clocks owe a
        // reclaim from the later of the expiry and the first moment a worker had room, not before.
        const roomAfterMs = Math.max(0, firstFreeSlotMs(skewOf.keys(), killedAt) - killedAt);
        const waited = Math.max(L + reclaimDelayMs, roomAfterMs);
        const bound = waited + pollIntervalMs + lag + SCHEDULING_SLACK_MS;
        ctx.expect(
          latency <= bound,
          `reclaimed ${Math.round(latency)} ms after the kill (> max(L + reclaim delay, a free slot after ${roomAfterMs}) + poll + λ ${lag} + ε = ${bound})`,
        );
      } else {
        ctx.fault('killed after its completion committed');
      }
    } else if (fault === 'sigstop 2L') {
      a.kill('SIGSTOP');
      await ctx.sleepUntil(Date.now() + 2 * L);
      a.kill('SIGCONT');
      const ended = await a.waitFor('fixture:ended', ofVictim, { timeoutMs: 3 * L + 10_000 });
      const signal = a.all('chaos:op', (m) => ofVictim(m) && m.op === 'signal')[0];
      if (ended.outcome === 'returned' && signal === undefined) ctx.fault('sigstop after the work');
      else {
        ctx.expect(
          signal !== undefined,
          `owner clock ${victimSkew.id}: signal never fired after a 2L freeze`,
        );
        ctx.expect(
          a.all('attempt:completed', ofVictim).length === 0,
          `owner clock ${victimSkew.id}: the zombie's completion was accepted after a 2L freeze`,
        );
      }
    }

    // No false expiry: every run whose owner got no fault was granted once and completed by that owner.
    let falseExpiries = 0;
    for (const { worker, claim } of claims) {
      await ctx.waitForRunEnd(claim.attempt.runId, 10 * L + 20_000);
      if (fault !== 'none' && worker === a) continue;
      const grants = (await readGrants(ctx.sql, ctx.schema, claim.attempt.stepId)).length;
      const own = (m: { attempt: { token: string } }): boolean => m.attempt.token === claim.attempt.token;
      const healthy =
        grants === 1 &&
        worker.all('attempt:completed', own).length === 1 &&
        worker.all('attempt:aborted', own).length === 0;
      if (!healthy) falseExpiries++;
      ctx.expect(
        healthy,
        `owner clock ${skewOf.get(worker)?.id ?? '?'}: a healthy lease was lost (${grants} grants, ` +
          `${worker.all('attempt:aborted', own).length} aborts)`,
      );
    }
    ctx.sample('falseExpiries', falseExpiries);
  },
  async finish(ctx) {
    const L = ctx.timings.leaseMs;
    // Every lease the database set is its own now() + L: no worker's clock entered a claim or a heartbeat.
    const [range] = await ctx.sql.unsafe<{ min_ms: number | null; max_ms: number | null }[]>(
      `SELECT min(extract(epoch from lease_expires_at - engine_at) * 1000)::float8 AS min_ms,
              max(extract(epoch from lease_expires_at - engine_at) * 1000)::float8 AS max_ms
         FROM "${ctx.schema}".audit WHERE status = 'running' AND lease_expires_at IS NOT NULL`,
    );
    ctx.expect(
      range?.min_ms != null && range.max_ms != null && range.min_ms > L - 500 && range.max_ms <= L + 50,
      `leases set by the database range ${range?.min_ms} … ${range?.max_ms} ms past its now(), not ≈ L = ${L}`,
    );
  },
});
