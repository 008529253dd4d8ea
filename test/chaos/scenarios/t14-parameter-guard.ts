/**
 * T14 — the parameter guard (research/fencing-semantics.md §3.3; DESIGN.md §4 invariant 9; I13). A worker whose
 * timings cannot keep its promise must refuse to start, with an error that names the option, before it claims
 * anything: heartbeat interval > L/3, heartbeat timeout > heartbeat interval, margin ≥ L/3, a lease below the
 * test floor (worker processes run under `unsafeTestTimings`), and — in process, without `unsafeTestTimings` —
 * a lease below the production floor of 3 s. A run is waiting the whole time; none of these workers may claim it.
 */
import { chaosActivity } from '../chaos-activity.js';
import { defineScenario } from '../define-scenario.js';
import type { SpawnOptions } from '../harness.js';

interface Case {
  readonly name: string;
  readonly option: string;
  readonly spawn: (L: number) => SpawnOptions;
}

const CASES: readonly Case[] = [
  {
    name: 'heartbeat > L/3',
    option: 'heartbeatIntervalMs',
    spawn: (L) => ({ timings: { heartbeatIntervalMs: Math.floor(L / 3) + 1, heartbeatTimeoutMs: 100 } }),
  },
  {
    name: 'heartbeat timeout > H',
    option: 'heartbeatTimeoutMs',
    spawn: (L) => ({
      timings: { heartbeatIntervalMs: Math.floor(L / 4), heartbeatTimeoutMs: Math.floor(L / 4) + 1 },
    }),
  },
  {
    name: 'margin ≥ L/3',
    option: 'leaseSafetyMarginMs',
    spawn: (L) => ({ timings: { leaseSafetyMarginMs: Math.ceil(L / 3) } }),
  },
  {
    name: 'lease below the floor',
    option: 'leaseMs',
    spawn: () => ({ activityLeaseMs: 50, timings: { heartbeatIntervalMs: 10, heartbeatTimeoutMs: 5 } }),
  },
];

export const parameterGuard = defineScenario('T14 parameter guard', {
  description:
    'H > L/3, T_hb > H, M ≥ L/3, L below the floor: the worker refuses to start, naming the option',
  iterations: { full: 1, ci: 1 },
  /** A run waits the whole time. */
  setup: (ctx) => ctx.enqueue({ iterations: 3, sleepMs: 10 }),
  async iteration(ctx, { i }) {
    const L = ctx.timings.leaseMs;
    // The refused workers start side by side: each boots a Node process, the guard itself takes no time.
    const outcomes = await Promise.all(
      CASES.map((c) => {
        ctx.fault(`refused: ${c.name}`);
        return ctx.spawnWorker({ ...c.spawn(L), workerId: `t14-${c.option}-${i}` }).then(
          async (w) => {
            await w.stop(0);
            return 'started';
          },
          (error: unknown) => (error instanceof Error ? error.message : String(error)),
        );
      }),
    );
    for (const [k, c] of CASES.entries()) {
      const outcome = outcomes[k] ?? '';
      ctx.expect(outcome !== 'started', `${c.name}: the worker started`);
      ctx.expect(
        outcome.includes('INVALID_OPTIONS') && outcome.includes(c.option),
        `${c.name}: the refusal does not name ${c.option}: ${outcome.slice(0, 300)}`,
      );
    }
    // In process, production floors: L = the scenario's lease (< 3 s) without unsafeTestTimings.
    ctx.fault('refused: lease below the production floor');
    let thrown: unknown;
    try {
      ctx.engine.worker({
        activities: [chaosActivity({ leaseMs: L })],
        heartbeatIntervalMs: Math.floor(L / 4),
      });
    } catch (error) {
      thrown = error;
    }
    const message = thrown instanceof Error ? thrown.message : '';
    ctx.expect(
      (thrown as { code?: string } | undefined)?.code === 'INVALID_OPTIONS' && message.includes('leaseMs'),
      `a ${L} ms lease without unsafeTestTimings was not refused naming leaseMs: ${message || 'no error'}`,
    );
  },
  async finish(ctx, { runId }) {
    const [row] = await ctx.sql.unsafe<{ grants: number }[]>(
      `SELECT count(*)::int AS grants FROM "${ctx.schema}".audit a JOIN "${ctx.schema}".steps s ON s.id = a.step_id
        WHERE s.run_id = $1 AND a.fencing_token IS NOT NULL`,
      [runId],
    );
    ctx.expect(row?.grants === 0, `a refused worker claimed the waiting run (${row?.grants} grants)`);
  },
});
