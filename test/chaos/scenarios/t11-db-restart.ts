/**
 * T11 — the database restarts under load (research/fencing-semantics.md §3.3). Three workers (two slots each)
 * run six `chaos-loop` steps; the suite's server is stopped — fast shutdown (SIGINT: sessions terminated) or an
 * immediate one (SIGQUIT: a crash, WAL recovery on start) — and started again, with a downtime below L or above
 * L. The workers are never restarted: the engine must reconnect on its own.
 *
 * Every checker stays 0 (acknowledged completions survive the crash: the suite's server has
 * synchronous_commit on). Below L no attempt should abort on its local deadline (counted, reported: an attempt
 * whose own fenced write failed on the dropped connection ends by the activity's choice and is retried, which
 * is the at-least-once cost, not an abort). Above L every attempt in flight at the shutdown must abort locally
 * and its step be granted again under a new token. Reports the downtime, the recovery time (server ready →
 * first successful lease operation of every worker that held attempts) and the extra grants per restart.
 */
import type { ChildMessage } from '../../fixtures/worker-protocol.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import { leaseExpiryMs, readGrants } from '../checker.js';
import { defineScenario } from '../define-scenario.js';

const CASES = [
  { mode: 'fast', downFactor: 0.3 },
  { mode: 'immediate', downFactor: 2 },
  { mode: 'immediate', downFactor: 0.3 },
  { mode: 'fast', downFactor: 2 },
] as const;
const RUNS_PER_RESTART = 6;

/** A message that shows the worker talked to the database successfully. */
const isLeaseSuccess = (m: ChildMessage): boolean =>
  (m.type === 'heartbeat:sent' && m.renewed > 0) ||
  m.type === 'attempt:claimed' ||
  m.type === 'attempt:completed' ||
  m.type === 'attempt:failed' ||
  m.type === 'attempt:released' ||
  m.type === 'attempt:stale-rejected';

export const dbRestart = defineScenario('T11 DB restart', {
  description: 'fast / immediate restart of the server under load, downtime < L and > L; workers reconnect',
  iterations: { full: 8, ci: 1, variants: CASES },
  async setup(ctx) {
    const workers: WorkerProcess[] = [];
    for (let i = 0; i < 3; i++) workers.push(await ctx.spawnWorker({ concurrency: 2 }));
    return workers;
  },
  async iteration(ctx, { variant: { mode, downFactor } }, workers) {
    const L = ctx.timings.leaseMs;
    const runs = [];
    for (let r = 0; r < RUNS_PER_RESTART; r++) runs.push(await ctx.enqueue({ iterations: 60, sleepMs: 50 }));
    const claims = await Promise.all(runs.map((r) => ctx.waitForClaim(r.runId, workers)));
    await ctx.sleepUntil(Date.now() + ctx.rng.int(200, 800));

    const marks = new Map(workers.map((w) => [w, w.mark()]));
    // In flight at the shutdown: claimed, not yet ended on its worker.
    const inFlight = claims.filter(
      ({ worker, claim }) =>
        worker.all('fixture:ended', (m) => m.attempt.token === claim.attempt.token).length === 0,
    );
    const downAt = Date.now();
    await ctx.server.shutdown(mode);
    ctx.fault(`${mode} restart ${downFactor}L`);
    await ctx.sleepUntil(downAt + downFactor * L);
    await ctx.server.start();
    const upAt = Date.now();
    const downtimeMs = upAt - downAt;
    ctx.sample('downtimeMs', downtimeMs);

    // Recovery: every worker that held attempts makes a successful lease operation again.
    const holders = [...new Set(inFlight.map((c) => c.worker))];
    const recovered = await Promise.all(
      holders.map((w) =>
        ctx
          .poll(
            `${w.workerId} talking to the database after the restart`,
            () =>
              Promise.resolve(
                w.messages.slice(marks.get(w)).find((m) => isLeaseSuccess(m) && m.wallMs >= upAt),
              ),
            4 * L + 20_000,
          )
          .then((m) => m.wallMs - upAt)
          .catch(() => undefined),
      ),
    );
    for (const [k, ms] of recovered.entries()) {
      ctx.expect(ms !== undefined, `${holders[k]?.workerId} did not recover after a ${mode} restart`);
      if (ms !== undefined) ctx.sample('recoveryMs', ms);
    }

    await Promise.all(runs.map((r) => ctx.waitForRunEnd(r.runId, 10 * L + 30_000)));
    let extra = 0;
    for (const { worker, claim } of inFlight) {
      const token = claim.attempt.token;
      const grants = await readGrants(ctx.sql, ctx.schema, claim.attempt.stepId);
      extra += grants.length - 1;
      const aborted = worker.all(
        'attempt:aborted',
        (m) => m.attempt.token === token && m.reason === 'lease-expired-locally',
      );
      const ended = worker.all('fixture:ended', (m) => m.attempt.token === token)[0];
      if (aborted.length > 0) ctx.fault(`local abort ${downtimeMs > L ? '>L' : '<L'}`);
      else if (ended?.outcome === 'threw') ctx.fault(`activity threw on the lost connection`);
      if (downtimeMs > L) {
        // Stopped before the database could let anyone else in: by its local deadline, or because its own
        // write failed on the dropped connection first (the activity's choice); then granted again.
        const expiryMs = await leaseExpiryMs(ctx.sql, ctx.schema, claim.attempt.stepId, token);
        const stoppedAt = Math.min(aborted[0]?.wallMs ?? Infinity, ended?.wallMs ?? Infinity);
        ctx.expect(
          expiryMs !== undefined && stoppedAt < expiryMs,
          `${claim.attempt.runId}: in flight across a ${downtimeMs} ms outage (> L), still running at its DB ` +
            `expiry (stopped ${stoppedAt}, expiry ${expiryMs})`,
        );
        ctx.expect(
          grants.some((g) => g.token > BigInt(token)),
          `${claim.attempt.runId}: not granted again under a new token after a ${downtimeMs} ms outage`,
        );
      }
    }
    ctx.sample(`extraGrantsPerRestart ${downtimeMs > L ? '>L' : '<L'}`, extra);
  },
});
