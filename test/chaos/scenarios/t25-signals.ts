/**
 * T25 — signals under faults (issue 13). Runs of `signal-collector` (test/fixtures/activities.ts) each wait for
 * `COUNT` `item` signals and return them in the order they took them. Two workers serve them, each through its
 * own TCP proxy; while the test's client (connected directly) sends every run its signals, one at a time in a
 * random order of runs, one worker is hit: frozen (SIGSTOP) for 2L, SIGKILLed and replaced, or cut off from the
 * database for 2L. Every signal must be taken exactly once and none lost: each run completes with its signals
 * in the order it was sent them, every stored signal names the wait that took it (a different wait each), and the
 * run's history holds one `signal:received` per signal.
 */
import type { TcpProxy } from '../../support/tcp-proxy.js';
import { fixtureActivities, fixtureWorkflows, itemSignal } from '../../fixtures/activities.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import { defineScenario } from '../define-scenario.js';
import { spawnBehindProxy } from '../proxy-faults.js';
import type { ScenarioContext } from '../harness.js';

const FAULTS = ['sigstop', 'sigkill', 'partition'] as const;
const RUNS = 4;
const COUNT = 3;

/** A worker reaching the database through its own proxy, recorded in `links`. */
async function spawn(ctx: ScenarioContext, links: Map<WorkerProcess, TcpProxy>, id: string) {
  const { proxy, worker } = await spawnBehindProxy(ctx, { workerId: id });
  links.set(worker, proxy);
  return worker;
}

export const signals = defineScenario('T25 signals', {
  description:
    'send signals while a worker is frozen / killed / cut off for 2L; each is taken once, in order, none lost',
  iterations: { full: 9, ci: 3, variants: FAULTS },
  async setup(ctx) {
    // The definition to start runs with (the workers define the same workflow; activities play no part).
    const { signalCollector } = fixtureWorkflows(fixtureActivities({ leaseMs: ctx.timings.leaseMs }));
    const links = new Map<WorkerProcess, TcpProxy>();
    const workers = [await spawn(ctx, links, 't25-a'), await spawn(ctx, links, 't25-b')];
    return { signalCollector, links, workers };
  },
  async iteration(ctx, { i, variant: fault }, state) {
    const L = ctx.timings.leaseMs;
    const { signalCollector, links, workers } = state;
    const runs = await Promise.all(
      Array.from({ length: RUNS }, () => ctx.startRun(signalCollector, { count: COUNT })),
    );
    const target = workers[ctx.rng.int(0, workers.length - 1)] as WorkerProcess;
    const faultAt = Date.now();
    if (fault === 'sigstop') target.kill('SIGSTOP');
    else if (fault === 'partition') links.get(target)?.blackhole();
    else {
      target.kill('SIGKILL');
      await target.exited;
      state.workers = [...workers.filter((w) => w !== target), await spawn(ctx, links, `t25-${i}`)];
    }
    ctx.fault(`${fault} while signalling`);
    // Each run's signals in order, the runs interleaved at random, spread over the fault.
    const sent = new Map(runs.map((r) => [r.runId, [] as string[]]));
    const queue = runs.flatMap((r) => Array.from({ length: COUNT }, () => r));
    while (queue.length > 0) {
      const [run] = queue.splice(ctx.rng.int(0, queue.length - 1), 1);
      if (!run) break;
      const items = sent.get(run.runId) as string[];
      const item = `${i}-${items.length}`;
      await run.signal(itemSignal, item);
      items.push(item);
      await ctx.sleepUntil(Date.now() + ctx.rng.int(0, (2 * L) / (RUNS * COUNT)));
    }
    if (fault !== 'sigkill') {
      await ctx.sleepUntil(faultAt + 2 * L);
      if (fault === 'sigstop') target.kill('SIGCONT');
      else links.get(target)?.restore();
    }
    for (const run of runs) await expectTakenOnce(ctx, run.runId, sent.get(run.runId) ?? [], L);
  },
});

async function expectTakenOnce(
  ctx: ScenarioContext,
  runId: string,
  sent: string[],
  L: number,
): Promise<void> {
  const status = await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  ctx.expect(status === 'completed', `${runId}: run ${status}, want completed`);
  const output = (await ctx.engine.client.getHandle(runId).describe()).run.output;
  ctx.expect(
    JSON.stringify(output) === JSON.stringify(sent),
    `${runId}: took ${JSON.stringify(output)}, was sent ${JSON.stringify(sent)}`,
  );
  const stored = await ctx.sql.unsafe<{ payload: string; step_id: string | null }[]>(
    `SELECT payload #>> '{}' AS payload, step_id::text FROM "${ctx.schema}".signals WHERE run_id = $1 ORDER BY id`,
    [runId],
  );
  const takers = new Set(stored.map((g) => g.step_id));
  ctx.expect(
    stored.length === sent.length && !takers.has(null) && takers.size === sent.length,
    `${runId}: ${stored.length} stored signals for ${sent.length} sent, taken by ${takers.size} distinct waits`,
  );
  const [received] = await ctx.sql.unsafe<{ n: number }[]>(
    `SELECT count(*)::int AS n FROM "${ctx.schema}".events WHERE run_id = $1 AND type = 'signal:received'`,
    [runId],
  );
  ctx.expect(
    received?.n === sent.length,
    `${runId}: ${received?.n} signal:received events, want ${sent.length}`,
  );
  ctx.sample('signalsPerRun', stored.length);
}
