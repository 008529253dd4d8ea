/**
 * 10. A held MVCC horizon (issue 28's target): no-op jobs are offered at a fixed rate (BENCH_HORIZON_RATE; every
 * 20 ms one `client.enqueueMany` call with the jobs due by then, paced by the clock, not by the previous call
 * returning) for BENCH_HORIZON_SECONDS,
 * while another session — a connection of its own, not the engine's — holds a transaction with an assigned xid
 * (`BEGIN; SELECT txid_current();` then idle) from 1/10 of the duration for 4/5 of it (300 s: from 30 s to 270 s).
 * While it is open no dead row version or index entry written after its snapshot can be removed (not by on-access
 * pruning, not by VACUUM), so a claim that scans where the claimed rows' old versions lie walks more of them with
 * every job done.
 *
 * The producer is an engine of its own on the same schema, with its own pool of BENCH_POOL_SIZE connections (as a
 * separate application would be), so enqueue calls waiting for a connection never delay the worker's claims.
 *
 * Per 5 s window (by the time since the offering began): jobs offered (enqueue calls made), enqueued (calls
 * returned, by their jobs), completed (the worker's `attempt:completed`) and completed / offered; claim latency p50 / p99 as the
 * other scenarios measure it — the enqueue call → the start of the activity's `run`, by the start's window — and,
 * with BENCH_PROFILE on, the claim statement's own client-observed time (`claim-steps`, pool wait included) p99;
 * the backlog (offered − completed) at the window's end; and for `runs`, `steps` and `attempt_records` the dead tuples
 * (`pg_stat_user_tables.n_dead_tup` at the window's end) and the HOT share of the window's updates
 * (`n_tup_hot_upd / n_tup_upd`, differences). Backends flush those counts at most once a second, so a window's
 * figures lag by up to a second.
 *
 * The verdict line compares with the targets: completed ≥ 95 % of offered in every full window of the offering,
 * claim p99 < 1 s in every window, and drained within 30 s of the transaction's end — drained meaning every job
 * offered before the rollback has completed (the offering goes on meanwhile). It is a benchmark: a missed target
 * is printed, never an exit code. The holder's transaction is rolled back at its time, when the scenario fails,
 * and when the run is interrupted (the server's deferred cleanup); `idle_in_transaction_session_timeout` ends it
 * on the server if this process dies without closing its connection.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from '@palisade/engine/postgres';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { createEngine } from '@palisade/engine';
import { openCountedClient } from '../engine-client.js';
import type { WorkCost } from '../costs.js';
import { probeNowMs } from '../definitions.js';
import type { TableCounters } from '../meter.js';
import { onStatement } from '../profiler.js';
import { quantile, round } from '../stats.js';
import { withEngine, workerSettings, type ScenarioContext, type WorkerSettings } from './context.js';

export const HORIZON_WINDOW_MS = 5_000;
/** The producer sends the jobs due every this many ms in one `enqueueMany` call (10 per call at 500/s). */
export const PRODUCER_TICK_MS = 20;
/** The targets. */
export const HORIZON_TARGETS = { minRatio: 0.95, maxClaimP99Ms: 1_000, maxDrainMs: 30_000 } as const;
const HOT_TABLES = ['runs', 'steps', 'attempt_records'] as const;
type HotTable = (typeof HOT_TABLES)[number];

export interface HorizonTableWindow {
  /** n_dead_tup at the window's end. */
  readonly deadTuples: number;
  /** Updates in the window (n_tup_upd difference) and how many of them were HOT. */
  readonly updates: number;
  readonly hotUpdates: number;
}

export interface HorizonWindow {
  /** Window start, s since the offering began. */
  readonly fromS: number;
  /** Whether the holder's transaction was open at any time in the window. */
  readonly held: boolean;
  readonly offered: number;
  readonly enqueued: number;
  readonly completed: number;
  /** completed / offered (NaN when nothing was offered). */
  readonly ratio: number;
  /** Enqueue call → start of `run`, for the jobs that started in this window. */
  readonly claimSamples: number;
  readonly claimP50Ms: number;
  readonly claimP99Ms: number;
  /** The claim statement's own client-observed time (NaN with BENCH_PROFILE=0 or no claim in the window). */
  readonly claimStatements: number;
  readonly claimStatementP99Ms: number;
  /** offered − completed at the window's end. */
  readonly backlog: number;
  readonly tables: Readonly<Record<HotTable, HorizonTableWindow>>;
}

export interface HeldHorizonVerdict {
  readonly passed: boolean;
  /** The lowest completed / offered among the full windows of the offering, and where it was. */
  readonly worstRatio: number;
  readonly worstRatioFromS: number;
  readonly claimP99WorstMs: number;
  readonly claimP99WorstFromS: number;
  /** Enqueue → start p99 over the whole run. */
  readonly claimP99AllMs: number;
  /** From the rollback until every job offered before it had completed; null: not within the wait. */
  readonly drainMs: number | null;
  readonly backlogAtReleaseJobs: number;
  readonly maxBacklogJobs: number;
  readonly maxDeadTuples: Readonly<Record<HotTable, number>>;
}

export interface HeldHorizonResult {
  readonly ratePerSec: number;
  readonly durationS: number;
  readonly holdFromS: number;
  readonly holdForS: number;
  readonly concurrency: number;
  readonly worker: WorkerSettings;
  /** The holder's assigned xid (txid_current()). */
  readonly holderXid: string;
  readonly offered: number;
  readonly completed: number;
  readonly enqueueErrors: number;
  /** Whether the claim statement's own time was measured (BENCH_PROFILE). */
  readonly claimStatementTimed: boolean;
  readonly windows: readonly HorizonWindow[];
  readonly verdict: HeldHorizonVerdict;
  readonly tables: TableCounters;
  readonly costs: WorkCost;
}

const probeInput = z.object({ seq: z.number().int(), enqueuedAtMs: z.number() });

/** One connection holding an open transaction with an assigned xid; `release()` rolls it back (idempotent). */
interface Holder {
  readonly xid: string;
  release(): Promise<void>;
}

async function holdXid(url: string, maxIdleMs: number): Promise<Holder> {
  const sql = postgres(url, {
    max: 1,
    onnotice: () => undefined,
    connection: {
      application_name: 'palisade-bench-horizon-holder',
      // Ends the transaction on the server if this process dies without closing the connection.
      idle_in_transaction_session_timeout: maxIdleMs,
    },
  });
  const reserved = await sql.reserve();
  let released: Promise<void> | undefined;
  const release = (): Promise<void> =>
    (released ??= (async () => {
      try {
        await reserved`rollback`;
      } finally {
        reserved.release();
        await sql.end({ timeout: 5 });
      }
    })());
  try {
    await reserved`begin`;
    const [row] = await reserved<{ xid: string }[]>`select txid_current()::text as xid`;
    return { xid: row?.xid ?? '?', release };
  } catch (error) {
    await release().catch(() => undefined);
    throw error;
  }
}

interface TableStat {
  dead: number;
  upd: number;
  hot: number;
}

async function hotTableStats(admin: postgres.Sql, schema: string): Promise<Record<HotTable, TableStat>> {
  const rows = await admin<{ relname: string; dead: string; upd: string; hot: string }[]>`
    select relname, n_dead_tup::text as dead, n_tup_upd::text as upd, n_tup_hot_upd::text as hot
      from pg_stat_user_tables where schemaname = ${schema} and relname in ${admin(HOT_TABLES)}`;
  const out = {} as Record<HotTable, TableStat>;
  for (const t of HOT_TABLES) {
    const r = rows.find((x) => x.relname === t);
    out[t] = { dead: Number(r?.dead ?? 0), upd: Number(r?.upd ?? 0), hot: Number(r?.hot ?? 0) };
  }
  return out;
}

/** Per-window tallies, filled as things happen (index = floor(ms since start / window)). */
class Tally {
  readonly offered: number[] = [];
  readonly enqueued: number[] = [];
  readonly completed: number[] = [];
  readonly claims: number[][] = [];
  readonly claimStatements: number[][] = [];
  constructor(private readonly t0: number) {}
  index(at = performance.now()): number {
    return Math.max(0, Math.floor((at - this.t0) / HORIZON_WINDOW_MS));
  }
  add(list: number[], at?: number): void {
    const i = this.index(at);
    list[i] = (list[i] ?? 0) + 1;
  }
  push(list: number[][], value: number, at?: number): void {
    (list[this.index(at)] ??= []).push(value);
  }
}

export async function heldHorizon(
  ctx: ScenarioContext,
  progress: (message: string) => void,
): Promise<HeldHorizonResult> {
  const { config, server } = ctx;
  const rate = config.horizonRatePerSec;
  const durationMs = config.horizonSeconds * 1000;
  const holdFromMs = durationMs / 10;
  const holdForMs = (durationMs * 4) / 5;
  const total = Math.floor((rate * durationMs) / 1000);

  const runSeq = new Map<string, number>();
  let tally: Tally | undefined;
  const probe = defineActivity({
    name: 'bench.horizon-probe',
    input: probeInput,
    output: z.object({}),
    leaseMs: config.leaseMs,
    run(input, actx) {
      const now = probeNowMs();
      runSeq.set(actx.info.runId, input.seq);
      tally?.push(tally.claims, now - input.enqueuedAtMs);
      return Promise.resolve({});
    },
  });

  const { result, tables, costs } = await withEngine(ctx, 'horizon', async (run) => {
    const worker = run.engine.worker({
      activities: [probe],
      concurrency: config.horizonConcurrency,
      pollIntervalMs: config.pollIntervalMs,
    });
    let completed = 0;
    // Which jobs completed (by seq), to tell when every job offered before the rollback has completed.
    const completedSeqs = new Uint8Array(total);
    let completedBeforeRelease = 0;
    let offeredAtRelease: number | undefined;
    let releasedAt: number | undefined;
    let backlogAtRelease = Number.NaN;
    let drainedAt: number | undefined;
    let failure: Error | undefined;
    let allDone: (() => void) | undefined;
    const done = new Promise<void>((resolve) => (allDone = resolve));
    worker.events.on('attempt:completed', ({ attempt }) => {
      completed++;
      if (tally) tally.add(tally.completed);
      const seq = runSeq.get(attempt.runId);
      runSeq.delete(attempt.runId);
      if (seq !== undefined) {
        completedSeqs[seq] = 1;
        if (offeredAtRelease !== undefined && seq < offeredAtRelease) {
          completedBeforeRelease++;
          if (completedBeforeRelease === offeredAtRelease) drainedAt ??= performance.now();
        }
      }
      if (completed === total) allDone?.();
    });
    worker.events.on('attempt:failed', ({ failure: f }) => {
      failure ??= new Error(`a no-op job failed: ${f.message}`);
      allDone?.();
    });
    await worker.start();
    // The producer has a pool of its own, as a separate application would: enqueue calls that queue up in a pool
    // must not delay the worker's claims in it. Same application_name, so costs.ts waits for its backends too.
    const producerClient = openCountedClient(server.url, {
      poolSize: config.poolSize,
      applicationName: run.schema,
    });
    const producer = await createEngine({ sql: producerClient.sql, schema: run.schema, migrate: false });

    const t0 = performance.now();
    const windows = new Tally(t0);
    tally = windows;
    const stopListening = onStatement((kind, ms) => {
      if (kind === 'claim-steps') windows.push(windows.claimStatements, ms);
    });
    const samples: { at: number; stats: Record<HotTable, TableStat>; offered: number; completed: number }[] =
      [];
    let offered = 0;
    let enqueueErrors = 0;
    let holder: Holder | undefined;
    let holdStartedAt: number | undefined;
    const undefer = server.defer(async () => {
      await holder?.release();
    });
    const pending = new Set<Promise<unknown>>();
    try {
      // The window sampler: stats at each window's end, until the offering ended and the backlog drained.
      let sampling = true;
      const sampler = (async () => {
        let next = t0 + HORIZON_WINDOW_MS;
        samples.push({
          at: t0,
          stats: await hotTableStats(server.admin, run.schema),
          offered: 0,
          completed: 0,
        });
        while (sampling) {
          const wait = next - performance.now();
          if (wait > 0) await sleep(wait);
          samples.push({
            at: next,
            stats: await hotTableStats(server.admin, run.schema),
            offered,
            completed,
          });
          const i = samples.length - 1;
          if (i % 6 === 0) {
            progress(
              `held-horizon: ${(i * HORIZON_WINDOW_MS) / 1000} s, offered ${offered}, completed ${completed}` +
                `, backlog ${offered - completed}` +
                (holder && releasedAt === undefined ? ' (xid held)' : ''),
            );
          }
          next += HORIZON_WINDOW_MS;
        }
      })();

      // The holder, on its own schedule.
      const holding = (async () => {
        await sleep(holdFromMs);
        holder = await holdXid(server.url, holdForMs + 60_000);
        holdStartedAt = performance.now();
        progress(`held-horizon: xid ${holder.xid} held (open transaction) for ${holdForMs / 1000} s`);
        await sleep(holdForMs);
        await holder.release();
        // From here every completion of a job offered so far counts towards the drain (no await in between).
        releasedAt = performance.now();
        offeredAtRelease = offered;
        backlogAtRelease = offered - completed;
        completedBeforeRelease = completedSeqs.subarray(0, offered).reduce((n, x) => n + x, 0);
        if (completedBeforeRelease === offeredAtRelease) drainedAt = releasedAt;
        progress(`held-horizon: transaction rolled back; backlog ${backlogAtRelease}`);
      })();

      // The producer: every PRODUCER_TICK_MS one `enqueueMany` call with the jobs due by then at `rate`, on time
      // whatever the earlier calls are doing (one call per job costs a commit each, which this shared 2-core
      // machine could not sustain at 500/s beside the worker: the producer would measure itself).
      const intervalMs = 1000 / rate;
      let tick = 0;
      while (offered < total) {
        const due = Math.min(total, Math.floor((performance.now() - t0) / intervalMs) + 1);
        if (due > offered) {
          const inputs: z.input<typeof probeInput>[] = [];
          const enqueuedAtMs = probeNowMs();
          while (offered < due) {
            inputs.push({ seq: offered++, enqueuedAtMs });
            windows.add(windows.offered);
          }
          const call = producer.client.enqueueMany(probe, inputs).then(
            () => {
              for (let k = 0; k < inputs.length; k++) windows.add(windows.enqueued);
            },
            (error: unknown) => {
              enqueueErrors += inputs.length;
              failure ??= error instanceof Error ? error : new Error(String(error));
            },
          );
          pending.add(call);
          void call.finally(() => pending.delete(call));
        }
        const wait = t0 + ++tick * PRODUCER_TICK_MS - performance.now();
        if (wait > 0) await sleep(wait);
      }
      await holding;
      const stopWaiting = new AbortController();
      const drainTimeout = sleep(config.horizonDrainTimeoutMs, 'timeout' as const, {
        signal: stopWaiting.signal,
      }).catch(() => 'done' as const);
      const finished = await Promise.race([done.then(() => 'done' as const), drainTimeout]);
      stopWaiting.abort();
      await Promise.all([...pending]);
      sampling = false;
      await sampler;
      if (failure) throw failure;
      if (finished === 'timeout') {
        progress(
          `held-horizon: ${total - completed} of ${total} jobs not completed ${config.horizonDrainTimeoutMs / 1000} s` +
            ' after the offering ended; reported as not drained',
        );
      }
      await worker.stop({ graceMs: 0 });
      return {
        windows,
        samples,
        offered,
        completed,
        enqueueErrors,
        holderXid: holder?.xid ?? '?',
        holdStartedAt: holdStartedAt ?? Number.NaN,
        releasedAt: releasedAt ?? Number.NaN,
        backlogAtRelease,
        drainedAt,
        t0,
        settings: workerSettings(worker),
      };
    } finally {
      stopListening();
      tally = undefined;
      await producer.close({ graceMs: 0 }).catch(() => undefined);
      await producerClient.end().catch(() => undefined);
      await holder?.release().catch(() => undefined);
      undefer();
    }
  });
  return summarizeHorizon(config, result, tables, costs);
}

function summarizeHorizon(
  config: ScenarioContext['config'],
  r: {
    windows: Tally;
    samples: { at: number; stats: Record<HotTable, TableStat>; offered: number; completed: number }[];
    offered: number;
    completed: number;
    enqueueErrors: number;
    holderXid: string;
    holdStartedAt: number;
    releasedAt: number;
    backlogAtRelease: number;
    drainedAt: number | undefined;
    t0: number;
    settings: WorkerSettings;
  },
  tables: TableCounters,
  costs: WorkCost,
): HeldHorizonResult {
  const durationMs = config.horizonSeconds * 1000;
  const windows: HorizonWindow[] = [];
  for (let i = 1; i < r.samples.length; i++) {
    const before = r.samples[i - 1];
    const after = r.samples[i];
    if (!before || !after) continue;
    const w = i - 1;
    const claims = [...(r.windows.claims[w] ?? [])].sort((a, b) => a - b);
    const statements = [...(r.windows.claimStatements[w] ?? [])].sort((a, b) => a - b);
    const offered = r.windows.offered[w] ?? 0;
    const completed = r.windows.completed[w] ?? 0;
    const fromMs = w * HORIZON_WINDOW_MS;
    const startMs = r.holdStartedAt - r.t0;
    const endMs = r.releasedAt - r.t0;
    const tableWindows = {} as Record<HotTable, HorizonTableWindow>;
    for (const t of HOT_TABLES) {
      tableWindows[t] = {
        deadTuples: after.stats[t].dead,
        updates: after.stats[t].upd - before.stats[t].upd,
        hotUpdates: after.stats[t].hot - before.stats[t].hot,
      };
    }
    windows.push({
      fromS: fromMs / 1000,
      held: fromMs + HORIZON_WINDOW_MS > startMs && fromMs < (Number.isNaN(endMs) ? Infinity : endMs),
      offered,
      enqueued: r.windows.enqueued[w] ?? 0,
      completed,
      ratio: offered > 0 ? completed / offered : Number.NaN,
      claimSamples: claims.length,
      claimP50Ms: round(quantile(claims, 0.5), 1),
      claimP99Ms: round(quantile(claims, 0.99), 1),
      claimStatements: statements.length,
      claimStatementP99Ms: round(quantile(statements, 0.99), 1),
      backlog: after.offered - after.completed,
      tables: tableWindows,
    });
  }
  // Full windows of the offering only: the last, partial one and the drain after it are not at the offered rate.
  const offering = windows.filter((w) => w.fromS * 1000 + HORIZON_WINDOW_MS <= durationMs && w.offered > 0);
  let worst = offering[0];
  for (const w of offering) if (worst === undefined || w.ratio < worst.ratio) worst = w;
  let worstClaim: HorizonWindow | undefined;
  for (const w of windows) {
    if (w.claimSamples > 0 && (worstClaim === undefined || w.claimP99Ms > worstClaim.claimP99Ms))
      worstClaim = w;
  }
  const allClaims = r.windows.claims.flat().sort((a, b) => a - b);
  const drainMs = r.drainedAt === undefined ? null : round(r.drainedAt - r.releasedAt, 0);
  const maxDead = {} as Record<HotTable, number>;
  for (const t of HOT_TABLES) maxDead[t] = Math.max(0, ...windows.map((w) => w.tables[t].deadTuples));
  const worstRatio = worst?.ratio ?? Number.NaN;
  const claimP99WorstMs = worstClaim?.claimP99Ms ?? Number.NaN;
  return {
    ratePerSec: config.horizonRatePerSec,
    durationS: config.horizonSeconds,
    holdFromS: durationMs / 10 / 1000,
    holdForS: (durationMs * 4) / 5 / 1000,
    concurrency: config.horizonConcurrency,
    worker: r.settings,
    holderXid: r.holderXid,
    offered: r.offered,
    completed: r.completed,
    enqueueErrors: r.enqueueErrors,
    claimStatementTimed: config.profile,
    windows,
    verdict: {
      passed:
        worstRatio >= HORIZON_TARGETS.minRatio &&
        claimP99WorstMs < HORIZON_TARGETS.maxClaimP99Ms &&
        drainMs !== null &&
        drainMs <= HORIZON_TARGETS.maxDrainMs,
      worstRatio: round(worstRatio, 3),
      worstRatioFromS: worst?.fromS ?? Number.NaN,
      claimP99WorstMs,
      claimP99WorstFromS: worstClaim?.fromS ?? Number.NaN,
      claimP99AllMs: round(quantile(allClaims, 0.99), 1),
      drainMs,
      backlogAtReleaseJobs: r.backlogAtRelease,
      maxBacklogJobs: Math.max(0, ...windows.map((w) => w.backlog)),
      maxDeadTuples: maxDead,
    },
    tables,
    costs,
  };
}
