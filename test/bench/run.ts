/**
 * `pnpm bench`: Palisade's throughput and latency on a real PostgreSQL (DESIGN.md §9), with a profile of where
 * the time goes. Not a test: it prints a report and writes it as JSON to test/bench/results/latest.json.
 *
 *   0. yardstick: plain single-row UPDATE transactions/s on the same server
 *   1. standalone no-op activities/s (10,000; worker concurrency 10 and 50), and the enqueue rate
 *   2. three-step no-op workflows/s (1,000)
 *   3. per-step overhead: (p50 of a sequential 3-step workflow − p50 of a 0-step one) / 3
 *   4. enqueue-to-start latency p50/p99 (500 activities enqueued at 50/s)
 *   5. this process's RSS and heap before and after
 *   6. a sequential 1,000-step workflow: time of its last 100 steps / its first 100
 *   7. single-job claim and completion latency with 10^6 finished jobs in the tables / with none
 *   8. worker RSS (after GC) sampled over many steps: last sample vs first
 *   9. evaluating 10,000 due schedules in one tick: time per schedule, by one evaluator and by three racing
 *  10. held-horizon: 500 no-op jobs/s offered for 5 min while another session holds an assigned xid for 4 of them:
 *      per 5 s window completed / offered, claim p50/p99, backlog, dead tuples and HOT share; a verdict line
 * and, for every engine run, rows written, WAL bytes and round trips per job, workflow run, step and turn.
 *
 * Every run gets a fresh schema that is dropped after it. Sizes and settings come from BENCH_* environment
 * variables (`pnpm bench --help` lists them). Progress goes to stderr, the report to stdout.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { ENV, loadConfig, type BenchConfig, type ScenarioName } from './config.js';
import { openBenchServer, type BenchServer } from './database.js';
import { formatJson } from './json.js';
import { loadAverage, machineInfo, postgresInfo } from './machine.js';
import { renderReport, type BenchResults, type MemorySnapshot } from './report.js';
import { activityThroughput, type ActivityThroughputResult } from './scenarios/activities.js';
import { plainUpdateBaseline, type BaselineResult } from './scenarios/baseline.js';
import { concurrencyKeys, type ConcurrencyKeysResult } from './scenarios/concurrency-keys.js';
import { heldHorizon, type HeldHorizonResult } from './scenarios/held-horizon.js';
import type { ScenarioContext, WorkerSettings } from './scenarios/context.js';
import { historySize, type HistorySizeResult } from './scenarios/history-size.js';
import { longWorkflow, type LongWorkflowResult } from './scenarios/long-workflow.js';
import { scheduleEvaluation, type ScheduleEvaluationResult } from './scenarios/schedules.js';
import { startLatency, type StartLatencyResult } from './scenarios/start-latency.js';
import { stepOverhead, type StepOverheadResult } from './scenarios/step-overhead.js';
import { workerMemory, type WorkerMemoryResult } from './scenarios/worker-memory.js';
import { workflowThroughput, type WorkflowThroughputResult } from './scenarios/workflows.js';
import { round } from './stats.js';

function memory(): MemorySnapshot {
  const m = process.memoryUsage();
  const mib = (bytes: number) => round(bytes / 2 ** 20, 1);
  return {
    rssMiB: mib(m.rss),
    heapUsedMiB: mib(m.heapUsed),
    heapTotalMiB: mib(m.heapTotal),
    externalMiB: mib(m.external),
  };
}

/** A full GC without --expose-gc on the command line (for the "after GC" memory figure only). */
function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

function isLocal(url: string): boolean {
  const host = new URL(url).hostname;
  return ['127.0.0.1', 'localhost', '::1', '[::1]', ''].includes(host);
}

function progress(message: string): void {
  process.stderr.write(`bench: ${message}\n`);
}

interface Collected {
  baseline?: BaselineResult;
  activities: ActivityThroughputResult[];
  concurrencyKeys?: ConcurrencyKeysResult;
  workflows?: WorkflowThroughputResult;
  overhead?: StepOverheadResult;
  latency?: StartLatencyResult;
  longWorkflow?: LongWorkflowResult;
  history?: HistorySizeResult;
  workerMemory?: WorkerMemoryResult;
  schedules?: ScheduleEvaluationResult;
  heldHorizon?: HeldHorizonResult;
  worker?: WorkerSettings;
  failures: { scenario: string; error: string }[];
  afterEachScenario: { scenario: string; memory: MemorySnapshot }[];
}

async function runScenarios(config: BenchConfig, ctx: ScenarioContext): Promise<Collected> {
  const out: Collected = { activities: [], failures: [], afterEachScenario: [] };
  const attempt = async (scenario: string, fn: () => Promise<void>) => {
    const started = performance.now();
    progress(`${scenario}…`);
    try {
      await fn();
      progress(`${scenario} done in ${round((performance.now() - started) / 1000, 1)} s`);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      progress(`${scenario} FAILED: ${message}`);
      out.failures.push({ scenario, error: message });
    }
    out.afterEachScenario.push({ scenario, memory: memory() });
  };
  const run: Record<ScenarioName, () => Promise<void>> = {
    baseline: () =>
      config.baselineMs === 0
        ? Promise.resolve()
        : attempt('baseline (plain UPDATE)', async () => {
            out.baseline = await plainUpdateBaseline(ctx);
          }),
    activities: async () => {
      for (const concurrency of config.activityConcurrencies) {
        await attempt(`activities, concurrency ${concurrency}`, async () => {
          const result = await activityThroughput(ctx, concurrency);
          out.activities.push(result);
          out.worker ??= result.worker;
        });
      }
    },
    'concurrency-keys': () =>
      attempt('activities with concurrency keys beside the same without', async () => {
        out.concurrencyKeys = await concurrencyKeys(ctx);
      }),
    workflows: () =>
      attempt('3-step workflows', async () => {
        out.workflows = await workflowThroughput(ctx);
        out.worker ??= out.workflows.worker;
      }),
    overhead: () =>
      attempt('per-step overhead', async () => {
        out.overhead = await stepOverhead(ctx);
        out.worker ??= out.overhead.worker;
      }),
    latency: () =>
      attempt('enqueue-to-start latency', async () => {
        out.latency = await startLatency(ctx);
        out.worker ??= out.latency.worker;
      }),
    'long-workflow': () =>
      attempt(`${config.longWorkflowSteps}-step sequential workflow`, async () => {
        out.longWorkflow = await longWorkflow(ctx);
        out.worker ??= out.longWorkflow.worker;
      }),
    history: () =>
      attempt(`latency with ${config.historySteps} finished jobs vs none`, async () => {
        out.history = await historySize(ctx, progress);
      }),
    memory: () =>
      attempt(`worker RSS over ${config.memorySteps} steps`, async () => {
        out.workerMemory = await workerMemory(ctx, collectGarbage);
        out.worker ??= out.workerMemory.worker;
      }),
    schedules: () =>
      attempt(`evaluate ${config.schedules} due schedules`, async () => {
        out.schedules = (await scheduleEvaluation(ctx)).result;
      }),
    'held-horizon': () =>
      attempt(
        `${config.horizonRatePerSec} jobs/s for ${config.horizonSeconds} s under a held xid`,
        async () => {
          out.heldHorizon = await heldHorizon(ctx, progress);
          out.worker ??= out.heldHorizon.worker;
        },
      ),
  };
  for (const scenario of config.scenarios) await run[scenario]();
  return out;
}

async function main(): Promise<number> {
  if (process.argv.includes('--help')) {
    const width = Math.max(...Object.keys(ENV).map((k) => k.length));
    process.stdout.write(
      'pnpm bench — environment variables:\n' +
        Object.entries(ENV)
          .map(([k, v]) => `  ${k.padEnd(width)}  ${v}`)
          .join('\n') +
        '\n',
    );
    return 0;
  }
  const config = loadConfig();
  const before = memory();
  const startedAt = new Date().toISOString();
  const started = performance.now();
  const server: BenchServer = await openBenchServer(config);
  const interrupt = (): void => {
    progress('interrupted; dropping the schemas made so far');
    void server.close().finally(() => process.exit(130));
  };
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  let results: BenchResults;
  try {
    const machine = machineInfo();
    const pg = await postgresInfo(server.admin);
    progress(
      `${pg.version.split(' on ')[0] ?? pg.version} at ${server.label}; scenarios ${config.scenarios.join(', ')}`,
    );
    const ctx: ScenarioContext = { config, server, localServer: server.embedded || isLocal(server.url) };
    const collected = await runScenarios(config, ctx);
    const after = memory();
    collectGarbage();
    const afterGc = memory();
    results = {
      startedAt,
      totalMs: round(performance.now() - started, 0),
      machine,
      loadAverageAtEnd: loadAverage(),
      postgres: {
        ...pg,
        server: server.label,
        embedded: server.embedded,
        fallbackReason: server.fallbackReason,
      },
      config,
      worker: collected.worker,
      ...(collected.baseline ? { baseline: collected.baseline } : {}),
      activities: collected.activities,
      ...(collected.concurrencyKeys ? { concurrencyKeys: collected.concurrencyKeys } : {}),
      ...(collected.workflows ? { workflows: collected.workflows } : {}),
      ...(collected.overhead ? { overhead: collected.overhead } : {}),
      ...(collected.latency ? { latency: collected.latency } : {}),
      ...(collected.longWorkflow ? { longWorkflow: collected.longWorkflow } : {}),
      ...(collected.history ? { history: collected.history } : {}),
      ...(collected.workerMemory ? { workerMemory: collected.workerMemory } : {}),
      ...(collected.schedules ? { schedules: collected.schedules } : {}),
      ...(collected.heldHorizon ? { heldHorizon: collected.heldHorizon } : {}),
      memory: {
        before,
        after,
        afterGc,
        peakRssMiB: round(process.resourceUsage().maxRSS / 1024, 1),
        afterEachScenario: collected.afterEachScenario,
      },
      failures: collected.failures,
    };
  } finally {
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
    await server.close();
  }
  process.stdout.write('\n' + renderReport(results));
  await mkdir(dirname(config.resultsPath), { recursive: true });
  await writeFile(config.resultsPath, formatJson(results));
  process.stdout.write(`\nJSON: ${config.resultsPath}\n`);
  return results.failures.length > 0 ? 1 : 0;
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(
      `bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  },
);
