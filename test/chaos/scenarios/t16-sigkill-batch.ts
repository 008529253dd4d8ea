/**
 * T16 — SIGKILL with a batched completion in flight. One worker gathers a wave of six short runs whose completions
 * go in one statement (./batch-wave.ts), held before it is sent, and is killed:
 *
 * - `held-before-send`: while the batch waits to be sent — nothing reaches the database; every step is reclaimed
 *   once its lease expired and completed by the replacement;
 * - `in-db-then-commits`: once the statement is in the database, waiting on an admin lock of one of the batch's
 *   runs (found in `pg_stat_activity` by the worker's `application_name`); the lock is released at once after the
 *   kill, and the orphaned statement commits every row under the dead worker's still-live leases — nobody hears
 *   of it, and nothing runs again;
 * - `in-db-past-leases`: the same, but the lock is held until every lease of the batch has expired; the orphaned
 *   statement's fence then refuses each row on its own, recording each as a stale completion, and the replacement
 *   reclaims and completes them.
 *
 * Pass: the checker's zeros (one terminal outcome per step, none outside a live lease, nothing acknowledged that is
 * not the step's outcome), every run completed, the held batch held all six rows, the killed worker acknowledged
 * none of them, and per kill point the grants and recorded rejections above.
 */
import { COMPLETION_STATEMENT, lockRow, waitingBackend, withApplicationName } from '../backend-faults.js';
import { defineScenario } from '../define-scenario.js';
import type { ScenarioContext } from '../harness.js';
import { WAVE_CONCURRENCY, expectWaveCompleted, finalSteps, startHeldWave } from './batch-wave.js';
import { rejectedCompletions, stepGrants } from './completions.js';

const POINTS = ['held-before-send', 'in-db-then-commits', 'in-db-past-leases'] as const;
const APPLICATION_NAME = 'chaos-t16';

const spawn = (ctx: ScenarioContext) =>
  ctx.spawnWorker({
    databaseUrl: withApplicationName(ctx.databaseUrl, APPLICATION_NAME),
    concurrency: WAVE_CONCURRENCY,
  });

export const sigkillBatch = defineScenario('T16 SIGKILL mid-batch', {
  description:
    'SIGKILL a worker whose batched completion (6 rows) is held before sending / blocked in the database; each step ends once',
  iterations: { full: 6, ci: 3, variants: POINTS },
  setup: async (ctx) => ({ a: await spawn(ctx) }),
  async iteration(ctx, { i, variant: point }, state) {
    const { a } = state;
    const { wave, tokens, release } = await startHeldWave(ctx, `t16-${i}`, a);

    let lock: { release(): Promise<void> } | undefined;
    if (point !== 'held-before-send') {
      lock = await lockRow(ctx, 'runs', ctx.rng.pick(wave.runs).runId);
      release();
      await waitingBackend(ctx, {
        applicationName: APPLICATION_NAME,
        pattern: COMPLETION_STATEMENT,
        terminate: false,
        timeoutMs: 5_000,
      }).catch((error: unknown) => {
        ctx.expect(false, `${wave.key} (${point}): ${(error as Error).message}`);
      });
    }
    a.kill('SIGKILL');
    ctx.fault(`sigkill ${point}`);
    const killed = a;
    await killed.exited;
    if (point === 'in-db-past-leases') {
      // The orphaned statement waits on the lock (lock_timeout 5 s) until no row of its batch holds a lease.
      await ctx.poll('every lease of the batch expired', async () => {
        const [row] = await ctx.sql.unsafe<{ live: number }[]>(
          `SELECT count(*)::int AS live FROM "${ctx.schema}".steps
              WHERE id = ANY($1::uuid[]) AND status = 'running' AND lease_expires_at > "${ctx.schema}"."now"()`,
          [[...tokens.keys()]],
        );
        return row?.live === 0 ? true : undefined;
      });
    }
    await lock?.release();
    state.a = await spawn(ctx);
    await expectWaveCompleted(ctx, wave, point);

    const final = await finalSteps(ctx, wave);
    const rejected = await rejectedCompletions(ctx, tokens.values());
    const acked = killed.all('attempt:completed', (m) => tokens.get(m.attempt.stepId) === m.attempt.token);
    ctx.expect(acked.length === 0, `${wave.key} (${point}): the killed worker acknowledged ${acked.length}`);
    let appliedByOrphan = 0;
    for (const [stepId, token] of tokens) {
      const grants = await stepGrants(ctx, stepId, point);
      const step = final.get(stepId);
      if (step?.token === token) appliedByOrphan++;
      if (point === 'in-db-then-commits') {
        ctx.expect(
          grants.length === 1 && step?.token === token && !rejected.has(token),
          `${wave.key} (${point}): step ${stepId} ${grants.length} grants, final token ${step?.token}, ` +
            `want completed once by the orphaned statement under ${token}`,
        );
      } else {
        ctx.expect(
          grants.length >= 2 && step?.token !== token,
          `${wave.key} (${point}): step ${stepId} ${grants.length} grants, final token ${step?.token}, ` +
            `want reclaimed after ${token}`,
        );
        const want = point === 'in-db-past-leases';
        ctx.expect(
          rejected.has(token) === want,
          `${wave.key} (${point}): the completion under ${token} ${rejected.has(token) ? 'was' : 'was not'} ` +
            `recorded as stale-rejected (${rejected.get(token) ?? '-'}), want ${want ? 'recorded' : 'never sent'}`,
        );
      }
    }
    ctx.fault(`${point}: ${appliedByOrphan} of ${tokens.size} rows applied by the killed worker's statement`);
  },
});
