/**
 * 7. Does a full database slow the engine down? Claim and completion latency of single jobs on an empty schema
 * vs on one holding 10^6 finished jobs (runs, steps, attempts, events copied from a real finished job, see
 * history-fill.ts). Two engines run side by side, each with an idle worker; jobs are sent one at a time,
 * alternating between the two databases so that drift on a shared machine hits both alike. Per job: enqueue call →
 * start of `run` (NOTIFY and claim) and enqueue call → the worker's `attempt:completed` (plus the completing
 * statement). Target: p50 full / p50 empty ≤ 1.2.
 *
 * No cost per unit over the engine's lifetime is reported for this run: the fill's rows and WAL would swamp it.
 * Instead each timed job's WAL is read off the server's insert position around it (`pg_current_wal_lsn()`, whole
 * server; the other side's worker is idle meanwhile): WAL that grows with the tables' size is what a page written
 * for the first time since the last checkpoint costs (a full-page image). The fill's WAL may bring a checkpoint
 * forward into the measurement (both databases share it, as they share the alternation).
 */
import { noopActivity, probeNowMs, startProbeActivity } from '../definitions.js';
import { fillHistory } from '../history-fill.js';
import { round, summarize, type LatencySummary } from '../stats.js';
import { withEngine, type EngineRun, type ScenarioContext } from './context.js';

export interface HistorySide {
  /** Finished jobs in the tables before the timed ones. */
  readonly finishedJobs: number;
  /** Enqueue call → start of `run`. */
  readonly claim: LatencySummary;
  /** Enqueue call → `attempt:completed` on the worker. */
  readonly completion: LatencySummary;
  /** Mean WAL bytes (whole server) from before each timed job's enqueue to its completion. */
  readonly walBytesPerJob: number;
}

export interface HistorySizeResult {
  readonly jobs: number;
  readonly warmup: number;
  readonly concurrency: number;
  /** Time to write the copies and VACUUM ANALYZE them. */
  readonly fillMs: number;
  readonly empty: HistorySide;
  readonly full: HistorySide;
  /** p50 full / p50 empty (target ≤ 1.2). */
  readonly claimRatio: number;
  readonly completionRatio: number;
}

interface Side {
  readonly run: EngineRun;
  time(): Promise<{ claimMs: number; completionMs: number; walBytes: number }>;
  stop(): Promise<void>;
}

/** A deferred that rejects after `timeoutMs` naming `what`. */
function deferred(timeoutMs: number, what: string) {
  let resolve!: (value: number) => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<number>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const timer = setTimeout(() => reject(new Error(`${what}: nothing after ${timeoutMs} ms`)), timeoutMs);
  void promise.then(
    () => clearTimeout(timer),
    () => undefined,
  );
  return { promise, resolve };
}

async function walPosition(ctx: ScenarioContext): Promise<string> {
  const [row] = await ctx.server.admin.unsafe<{ lsn: string }[]>('select pg_current_wal_lsn()::text as lsn');
  return row?.lsn ?? '0/0';
}

async function walSince(ctx: ScenarioContext, lsn: string): Promise<number> {
  const [row] = await ctx.server.admin.unsafe<{ bytes: string }[]>(
    'select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::text as bytes',
    [lsn],
  );
  return Number(row?.bytes ?? 0);
}

async function side(ctx: ScenarioContext, run: EngineRun, label: string): Promise<Side> {
  const { config } = ctx;
  // Set only while a timed job is in flight (one at a time per side).
  let started: ReturnType<typeof deferred> | undefined;
  let completed: ReturnType<typeof deferred> | undefined;
  const probe = startProbeActivity(config.leaseMs, () => started?.resolve(probeNowMs()));
  const worker = run.engine.worker({
    activities: [probe, noopActivity(config.leaseMs)],
    concurrency: config.latencyConcurrency,
    pollIntervalMs: config.pollIntervalMs,
  });
  worker.events.on('attempt:completed', () => completed?.resolve(probeNowMs()));
  await worker.start();
  return {
    run,
    async time() {
      started = deferred(config.phaseTimeoutMs, `${label}: job start`);
      completed = deferred(config.phaseTimeoutMs, `${label}: job completion`);
      const walBefore = await walPosition(ctx);
      const enqueuedAtMs = probeNowMs();
      await run.engine.client.enqueue(probe, { enqueuedAtMs });
      const [startMs, completeMs] = await Promise.all([started.promise, completed.promise]);
      started = completed = undefined;
      const walBytes = await walSince(ctx, walBefore);
      return { claimMs: startMs - enqueuedAtMs, completionMs: completeMs - enqueuedAtMs, walBytes };
    },
    stop: () => worker.stop({ graceMs: 0 }),
  };
}

const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

export async function historySize(
  ctx: ScenarioContext,
  progress: (message: string) => void,
): Promise<HistorySizeResult> {
  const { config } = ctx;
  const { result } = await withEngine(ctx, 'hist_empty', (emptyRun) =>
    withEngine(ctx, 'hist_full', async (fullRun) => {
      const empty = await side(ctx, emptyRun, 'empty database');
      const full = await side(ctx, fullRun, 'full database');
      try {
        // The template: one real finished job on the full database, copied `historySteps` times.
        const template = await fullRun.engine.client.enqueue(noopActivity(config.leaseMs), {});
        await template.result({ timeoutMs: config.phaseTimeoutMs });
        const fillStarted = performance.now();
        await fillHistory(ctx.server.admin, fullRun.schema, template.runId, config.historySteps, (n) =>
          progress(
            `history: ${n.toLocaleString('en-US')} of ${config.historySteps.toLocaleString('en-US')} jobs written`,
          ),
        );
        const fillMs = performance.now() - fillStarted;
        const [row] = await ctx.server.admin.unsafe<{ n: number }[]>(
          `select count(*)::int as n from "${fullRun.schema}".steps where status = 'completed'`,
        );
        const finishedFull = row?.n ?? 0;

        for (let i = 0; i < config.historyWarmup; i++) {
          await empty.time();
          await full.time();
        }
        const samples = {
          empty: { claim: [] as number[], completion: [] as number[], wal: [] as number[] },
          full: { claim: [] as number[], completion: [] as number[], wal: [] as number[] },
        };
        for (let i = 0; i < config.historyJobs; i++) {
          // Alternate which goes first, so neither always runs right after the other's completion.
          const order = i % 2 === 0 ? (['empty', 'full'] as const) : (['full', 'empty'] as const);
          for (const which of order) {
            const t = await (which === 'empty' ? empty : full).time();
            samples[which].claim.push(t.claimMs);
            samples[which].completion.push(t.completionMs);
            samples[which].wal.push(t.walBytes);
          }
        }
        return { samples, fillMs, finishedFull };
      } finally {
        await empty.stop();
        await full.stop();
      }
    }),
  );
  const inner = result.result;
  const emptySide: HistorySide = {
    finishedJobs: 0,
    claim: summarize(inner.samples.empty.claim),
    completion: summarize(inner.samples.empty.completion),
    walBytesPerJob: round(mean(inner.samples.empty.wal), 0),
  };
  const fullSide: HistorySide = {
    finishedJobs: inner.finishedFull,
    claim: summarize(inner.samples.full.claim),
    completion: summarize(inner.samples.full.completion),
    walBytesPerJob: round(mean(inner.samples.full.wal), 0),
  };
  return {
    jobs: config.historyJobs,
    warmup: config.historyWarmup,
    concurrency: config.latencyConcurrency,
    fillMs: round(inner.fillMs, 0),
    empty: emptySide,
    full: fullSide,
    claimRatio: round(fullSide.claim.p50Ms / emptySide.claim.p50Ms),
    completionRatio: round(fullSide.completion.p50Ms / emptySide.completion.p50Ms),
  };
}
