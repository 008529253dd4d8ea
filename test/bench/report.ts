/** Renders {@link BenchResults} as the plain-text report `pnpm bench` prints. */
import type { BenchConfig } from './config.js';
import type { MachineInfo, PostgresInfo } from './machine.js';
import type { WorkCost } from './costs.js';
import type { PhaseStats, TableCounters } from './meter.js';
import type { ActivityThroughputResult } from './scenarios/activities.js';
import type { ConcurrencyKeysResult } from './scenarios/concurrency-keys.js';
import type { BaselineResult } from './scenarios/baseline.js';
import type { WorkerSettings } from './scenarios/context.js';
import { HORIZON_TARGETS, type HeldHorizonResult } from './scenarios/held-horizon.js';
import type { HistorySizeResult } from './scenarios/history-size.js';
import type { LongWorkflowResult } from './scenarios/long-workflow.js';
import type { StartLatencyResult } from './scenarios/start-latency.js';
import type { ScheduleEvaluationResult } from './scenarios/schedules.js';
import type { StepOverheadResult } from './scenarios/step-overhead.js';
import type { WorkerMemoryResult } from './scenarios/worker-memory.js';
import type { WorkflowThroughputResult } from './scenarios/workflows.js';

export interface MemorySnapshot {
  readonly rssMiB: number;
  readonly heapUsedMiB: number;
  readonly heapTotalMiB: number;
  readonly externalMiB: number;
}

export interface BenchResults {
  readonly startedAt: string;
  readonly totalMs: number;
  readonly machine: MachineInfo;
  /** 1, 5 and 15 minute load averages when the run ended. */
  readonly loadAverageAtEnd: readonly number[];
  readonly postgres: PostgresInfo & {
    readonly server: string;
    readonly embedded: boolean;
    readonly fallbackReason: string | undefined;
  };
  readonly config: BenchConfig;
  /** Settings the first worker resolved (heartbeat, poll interval…), as the engine filled them. */
  readonly worker: WorkerSettings | undefined;
  readonly baseline?: BaselineResult;
  readonly activities: ActivityThroughputResult[];
  readonly concurrencyKeys?: ConcurrencyKeysResult;
  readonly workflows?: WorkflowThroughputResult;
  readonly overhead?: StepOverheadResult;
  readonly latency?: StartLatencyResult;
  readonly longWorkflow?: LongWorkflowResult;
  readonly history?: HistorySizeResult;
  readonly workerMemory?: WorkerMemoryResult;
  readonly schedules?: ScheduleEvaluationResult;
  readonly heldHorizon?: HeldHorizonResult;
  readonly memory: {
    readonly before: MemorySnapshot;
    readonly after: MemorySnapshot;
    readonly afterGc: MemorySnapshot;
    readonly peakRssMiB: number;
    readonly afterEachScenario: readonly { readonly scenario: string; readonly memory: MemorySnapshot }[];
  };
  readonly failures: readonly { readonly scenario: string; readonly error: string }[];
}

const n0 = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
const n1 = new Intl.NumberFormat('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const n2 = new Intl.NumberFormat('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });

const int = (x: number) => (Number.isFinite(x) ? n0.format(x) : '–');
const dec1 = (x: number) => (Number.isFinite(x) ? n1.format(x) : '–');
const dec2 = (x: number) => (Number.isFinite(x) ? n2.format(x) : '–');
const secs = (ms: number) => `${dec1(ms / 1000)} s`;
const ms = (x: number) => `${dec2(x)} ms`;
const pct = (part: number, whole: number) => (whole > 0 ? `${n0.format((100 * part) / whole)}%` : '–');

/** Left-aligned text columns, right-aligned numeric ones (`align` per column: 'l' | 'r'). */
export function table(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
  align: string,
): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (align[i] === 'r' ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

function indent(text: string, by = '  '): string {
  return text
    .split('\n')
    .map((l) => by + l)
    .join('\n');
}

function header(r: BenchResults): string {
  const m = r.machine;
  const pg = r.postgres;
  const c = r.config;
  const w = r.worker;
  const settings = Object.entries(pg.settings)
    .map(([k, v]) => `${k}=${v}`)
    .join(' ');
  const lines = [
    `Palisade benchmark — ${r.startedAt} — ${secs(r.totalMs)} in all`,
    '',
    `Machine     ${m.cpuModel} × ${m.cpuCount} cores, ${dec1(m.totalMemoryGiB)} GiB RAM, ${m.os}, Node ${m.node}`,
    `            load average (1/5/15 min) ${m.loadAverage.map(dec2).join(' / ')} at start,` +
      ` ${r.loadAverageAtEnd.map(dec2).join(' / ')} at end` +
      (Math.max(m.loadAverage[0] ?? 0, r.loadAverageAtEnd[0] ?? 0) > m.cpuCount / 2
        ? ' — OTHER WORK WAS RUNNING: numbers are pessimistic and noisy'
        : ''),
    `PostgreSQL  ${pg.version}`,
    `            ${pg.server}${pg.embedded ? ' (EMBEDDED fallback: fsync off, not comparable)' : ''}`,
    `            ${settings}; other client sessions at start: ${pg.otherSessions}`,
    `Settings    engine pool ${c.poolSize} connections (LISTEN and heartbeats use connections of their own),` +
      ` statement profiling ${c.profile ? 'on' : 'off'}`,
    `            worker poll interval ${int(w?.pollIntervalMs ?? c.pollIntervalMs)} ms, activity lease ${int(
      w?.leaseMs ?? c.leaseMs,
    )} ms,` +
      (w
        ? ` heartbeat every ${int(w.heartbeatIntervalMs)} ms (timeout ${int(w.heartbeatTimeoutMs)} ms,` +
          ` local margin ${int(w.leaseSafetyMarginMs ?? Number.NaN)} ms)`
        : ' heartbeat lease/3') +
      `, turn lease ${int(c.turnLeaseMs)} ms`,
    `            ${int(c.enqueueConcurrency)} enqueue/start calls in flight while filling queues; every run on a fresh` +
      ` schema, dropped after it`,
  ];
  return lines.join('\n');
}

function results(r: BenchResults): string {
  const rows: string[][] = [];
  if (r.baseline) {
    const b = r.baseline;
    rows.push([
      '0',
      `plain 1-row UPDATE tx/s (yardstick)`,
      `${int(b.oneClientTxPerSec)} / ${int(b.manyClientsTxPerSec)}`,
      `1 client / ${b.clients} clients, ${secs(b.durationMs)} each, autocommit`,
    ]);
    rows.push([
      '0',
      `same UPDATE + pg_notify, ${b.clients} clients`,
      int(b.manyClientsNotifyTxPerSec),
      'commits that NOTIFY are serialized through their WAL flush: the ceiling of every notifying statement',
    ]);
    rows.push(['0', 'one round trip (select 1), p50', ms(b.roundTripP50Ms), '500 in a row, one connection']);
  }
  for (const a of r.activities) {
    rows.push([
      '1',
      `no-op activities/s, concurrency ${a.concurrency}`,
      int(a.drain.perSecond),
      `${int(a.activities)} in ${secs(a.drain.wallMs)} from worker.start(); enqueue ${int(a.enqueue.perSecond)}/s` +
        ` (${secs(a.enqueue.wallMs)})`,
    ]);
  }
  if (r.concurrencyKeys) {
    const k = r.concurrencyKeys;
    const keyed = k.keyed.keyed;
    rows.push([
      '1b',
      'no-op activities/s under concurrency keys, c=50',
      int(k.keyed.drain.perSecond),
      `${keyed ? `${keyed.keys} keys of limit ${keyed.limit}` : ''}; without keys ${int(k.plain.drain.perSecond)}/s` +
        ` just before: ratio ${k.ratio}`,
    ]);
  }
  if (r.workflows) {
    const w = r.workflows;
    rows.push([
      '2',
      `${w.steps}-step no-op workflows/s`,
      int(w.drain.perSecond),
      `${int(w.workflows)} in ${secs(w.drain.wallMs)} (${int(w.turnsCommitted)} turns, ` +
        `${int(w.workflows * w.steps)} activities); slots ${w.activityConcurrency} act / ${w.turnConcurrency} turn;` +
        ` start ${int(w.start.perSecond)}/s`,
    ]);
  }
  if (r.overhead) {
    const o = r.overhead;
    rows.push([
      '3',
      `per-step overhead`,
      ms(o.overheadPerStepMs),
      `(p50 ${o.steps}-step ${ms(o.threeStep.p50Ms)} − p50 0-step ${ms(o.zeroStep.p50Ms)}) / ${o.steps};` +
        ` ${o.samples} samples each after ${o.warmup} warm-up`,
    ]);
  }
  if (r.latency) {
    const l = r.latency;
    rows.push([
      '4',
      `enqueue→start p50 / p99`,
      `${ms(l.enqueueToStart.p50Ms)} / ${ms(l.enqueueToStart.p99Ms)}`,
      `${int(l.activities)} activities at ${int(l.achievedRatePerSec)}/s, concurrency ${l.concurrency};` +
        ` max ${ms(l.enqueueToStart.maxMs)}; enqueue call p50 ${ms(l.enqueueCall.p50Ms)}`,
    ]);
  }
  const mem = r.memory;
  rows.push([
    '5',
    'worker process RSS before → after',
    `${dec1(mem.before.rssMiB)} → ${dec1(mem.after.rssMiB)} MiB`,
    `heap used ${dec1(mem.before.heapUsedMiB)} → ${dec1(mem.after.heapUsedMiB)} MiB (total ` +
      `${dec1(mem.after.heapTotalMiB)}); after GC: RSS ${dec1(mem.afterGc.rssMiB)}, heap ${dec1(
        mem.afterGc.heapUsedMiB,
      )} MiB; peak RSS ${dec1(mem.peakRssMiB)} MiB`,
  ]);
  if (r.longWorkflow) {
    const l = r.longWorkflow;
    rows.push([
      '6',
      `${int(l.steps)}-step workflow, last ${l.window} / first ${l.window} steps`,
      `${dec2(l.ratio)}×`,
      `target ≤ 1.5${l.ratio > 1.5 ? ' MISSED' : ''}; ${secs(l.lastWindowMs)} vs ${secs(l.firstWindowMs)} (DB clock);` +
        ` whole run ${secs(l.run.wallMs)}`,
    ]);
  }
  if (r.history) {
    const h = r.history;
    const missed = (x: number) => (x > 1.2 ? ' MISSED' : '');
    rows.push([
      '7',
      `claim p50, ${int(h.full.finishedJobs)} finished jobs / none`,
      `${dec2(h.claimRatio)}×`,
      `target ≤ 1.2${missed(h.claimRatio)}; enqueue→start ${ms(h.full.claim.p50Ms)} vs ${ms(h.empty.claim.p50Ms)};` +
        ` ${int(h.jobs)} jobs each, one at a time`,
    ]);
    rows.push([
      '7',
      `completion p50, full / empty`,
      `${dec2(h.completionRatio)}×`,
      `target ≤ 1.2${missed(h.completionRatio)}; enqueue→completed ${ms(h.full.completion.p50Ms)} vs` +
        ` ${ms(h.empty.completion.p50Ms)}; fill took ${secs(h.fillMs)}`,
    ]);
    rows.push([
      '7',
      `WAL per job, full / empty`,
      `${dec2(h.full.walBytesPerJob / Math.max(1, h.empty.walBytesPerJob))}×`,
      `${int(h.full.walBytesPerJob)} B vs ${int(h.empty.walBytesPerJob)} B (whole server, around each timed job)`,
    ]);
  }
  if (r.workerMemory) {
    const m = r.workerMemory;
    const first = m.samples[0];
    const last = m.samples[m.samples.length - 1];
    rows.push([
      '8',
      `worker RSS after GC over ${int(m.steps)} steps`,
      `${m.rssChangePct > 0 ? '+' : ''}${dec1(m.rssChangePct)}%`,
      `target ±10%${Math.abs(m.rssChangePct) > 10 ? ' MISSED' : ''}; ${dec1(first?.rssMiB ?? Number.NaN)} MiB at` +
        ` step ${int(first?.steps ?? Number.NaN)} → ${dec1(last?.rssMiB ?? Number.NaN)} MiB at step` +
        ` ${int(last?.steps ?? Number.NaN)}; heap ${dec1(first?.heapUsedMiB ?? Number.NaN)} →` +
        ` ${dec1(last?.heapUsedMiB ?? Number.NaN)} MiB; ${m.samples.length} samples, ${int(m.run.perSecond)} steps/s` +
        // RSS left over from earlier scenarios is returned to the OS lazily and shows as a fall.
        (r.config.scenarios.length > 1
          ? '; ran after other scenarios (BENCH_ONLY=memory for a clean figure)'
          : ''),
    ]);
  }
  if (r.schedules) {
    const sc = r.schedules;
    rows.push([
      '9',
      `evaluate ${int(sc.schedules)} due schedules, one evaluator`,
      `${int(sc.single.perSecond)}/s`,
      `${dec2(sc.singleMsPerSchedule * 1000)} µs per schedule; ${int(sc.single.roundTrips)} round trips;` +
        ` ${secs(sc.single.wallMs)}`,
    ]);
    rows.push([
      '9',
      'the same, three evaluators racing',
      `${int(sc.contended.perSecond)}/s`,
      `${dec2(sc.contendedMsPerSchedule * 1000)} µs per schedule; ${int(sc.runs)} runs, ` +
        `${int(sc.duplicateTicks)} duplicate ticks`,
    ]);
  }
  if (r.heldHorizon) {
    const h = r.heldHorizon;
    const v = h.verdict;
    rows.push([
      '10',
      `${int(h.ratePerSec)} jobs/s, xid held ${int(h.holdForS)} of ${int(h.durationS)} s: worst window`,
      pct(v.worstRatio, 1),
      `completed / offered (target ≥ ${pct(HORIZON_TARGETS.minRatio, 1)}); claim p99 worst` +
        ` ${secs(v.claimP99WorstMs)}; drained ${v.drainMs === null ? 'never' : secs(v.drainMs)} after the rollback;` +
        ` ${v.passed ? 'targets met' : 'MISSED'} (see "Held horizon")`,
    ]);
  }
  return table(['#', 'benchmark', 'result', 'detail'], rows, 'llrl');
}

/** The held-horizon scenario's per-window table and its verdict line against the issue's targets. */
export function heldHorizonSection(h: HeldHorizonResult): string {
  const v = h.verdict;
  const rows = h.windows.map((w) => [
    `${int(w.fromS)}${w.held ? ' H' : ''}`,
    int(w.offered),
    int(w.enqueued),
    int(w.completed),
    Number.isFinite(w.ratio) ? pct(w.ratio, 1) : '–',
    w.claimSamples > 0 ? ms(w.claimP50Ms) : '–',
    w.claimSamples > 0 ? ms(w.claimP99Ms) : '–',
    w.claimStatements > 0 ? ms(w.claimStatementP99Ms) : '–',
    int(w.backlog),
    ...(['runs', 'steps', 'attempt_records'] as const).map(
      (t) => `${int(w.tables[t].deadTuples)} / ${pct(w.tables[t].hotUpdates, w.tables[t].updates)}`,
    ),
  ]);
  const miss = (ok: boolean) => (ok ? 'met' : 'MISSED');
  const verdict =
    `verdict: ${v.passed ? 'PASS' : 'FAIL'} — worst window ${pct(v.worstRatio, 1)} of offered at` +
    ` ${int(v.worstRatioFromS)} s (≥ ${pct(HORIZON_TARGETS.minRatio, 1)}: ${miss(v.worstRatio >= HORIZON_TARGETS.minRatio)});` +
    ` claim p99 worst ${ms(v.claimP99WorstMs)} at ${int(v.claimP99WorstFromS)} s, whole run ${ms(v.claimP99AllMs)}` +
    ` (< ${secs(HORIZON_TARGETS.maxClaimP99Ms)}: ${miss(v.claimP99WorstMs < HORIZON_TARGETS.maxClaimP99Ms)});` +
    ` drained ${v.drainMs === null ? 'not within the wait' : secs(v.drainMs)} after the rollback` +
    ` (≤ ${secs(HORIZON_TARGETS.maxDrainMs)}: ${miss(v.drainMs !== null && v.drainMs <= HORIZON_TARGETS.maxDrainMs)})`;
  return [
    `${int(h.offered)} no-op jobs offered at ${int(h.ratePerSec)}/s for ${int(h.durationS)} s (an enqueueMany call every 20 ms),` +
      ` worker concurrency ${h.concurrency}; xid ${h.holderXid} held (BEGIN; SELECT txid_current(); idle) from` +
      ` ${int(h.holdFromS)} s for ${int(h.holdForS)} s (windows marked H); ${int(h.completed)} completed,` +
      ` ${int(h.enqueueErrors)} enqueue errors`,
    `claim = enqueue call → start of run, by the window it started in; claim stmt = the claim statement's own` +
      ` client-observed time (pool wait included)${h.claimStatementTimed ? '' : ', not measured (BENCH_PROFILE=0)'};` +
      ` backlog = offered − completed at the window's end; dead / HOT = n_dead_tup at the window's end / HOT share of` +
      ` the window's updates (pg_stat_user_tables)`,
    '',
    table(
      [
        'from s',
        'offered',
        'enqueued',
        'completed',
        'compl/off',
        'claim p50',
        'claim p99',
        'claim stmt p99',
        'backlog',
        'runs dead / HOT',
        'steps dead / HOT',
        'attempt_records dead / HOT',
      ],
      rows,
      'lrrrrrrrrrrr',
    ),
    '',
    `backlog at the rollback ${int(v.backlogAtReleaseJobs)} jobs, largest ${int(v.maxBacklogJobs)}; dead tuples at most` +
      ` runs ${int(v.maxDeadTuples.runs)}, steps ${int(v.maxDeadTuples.steps)}, attempt_records ${int(v.maxDeadTuples.attempt_records)}`,
    verdict,
  ].join('\n');
}

function distributions(r: BenchResults): string | undefined {
  const rows: string[][] = [];
  const add = (
    name: string,
    s: { samples: number; p50Ms: number; p90Ms: number; p99Ms: number; maxMs: number },
  ) => rows.push([name, int(s.samples), ms(s.p50Ms), ms(s.p90Ms), ms(s.p99Ms), ms(s.maxMs)]);
  if (r.overhead) {
    add(`0-step workflow, start→result`, r.overhead.zeroStep);
    add(`${r.overhead.steps}-step workflow, start→result`, r.overhead.threeStep);
  }
  if (r.latency) {
    add('activity enqueue call → start of run', r.latency.enqueueToStart);
    add('activity enqueue call → returned', r.latency.enqueueCall);
  }
  if (r.history) {
    const h = r.history;
    add('single job enqueue → start, empty database', h.empty.claim);
    add(`single job enqueue → start, ${int(h.full.finishedJobs)} finished`, h.full.claim);
    add('single job enqueue → completed, empty database', h.empty.completion);
    add(`single job enqueue → completed, ${int(h.full.finishedJobs)} finished`, h.full.completion);
  }
  if (rows.length === 0) return undefined;
  return table(['latency', 'n', 'p50', 'p90', 'p99', 'max'], rows, 'lrrrrr');
}

function hops(r: BenchResults): string | undefined {
  const o = r.overhead;
  if (!o || o.hopSamples === 0) return undefined;
  const rows = o.hops.map((h) => [h.hop, ms(h.p50Ms), ms(h.meanMs)]);
  return (
    `One ${o.steps}-step workflow, hop by hop (worker events; ${o.hopSamples} of ${o.samples} samples in order)\n` +
    table(['hop', 'p50', 'mean'], rows, 'lrr')
  );
}

interface NamedPhase {
  readonly name: string;
  readonly stats: PhaseStats;
}

function phases(r: BenchResults): NamedPhase[] {
  const out: NamedPhase[] = [];
  for (const a of r.activities) {
    out.push({ name: `act c=${a.concurrency} enqueue`, stats: a.enqueue });
    out.push({ name: `act c=${a.concurrency} drain`, stats: a.drain });
  }
  if (r.workflows) {
    out.push({ name: 'wf start', stats: r.workflows.start });
    out.push({ name: 'wf drain', stats: r.workflows.drain });
  }
  if (r.overhead) out.push({ name: 'overhead samples', stats: r.overhead.sampling });
  if (r.latency) out.push({ name: 'latency paced', stats: r.latency.paced });
  if (r.longWorkflow) out.push({ name: `${r.longWorkflow.steps}-step workflow`, stats: r.longWorkflow.run });
  if (r.workerMemory) out.push({ name: 'memory run', stats: r.workerMemory.run });
  if (r.schedules) {
    out.push({ name: 'schedules, 1 evaluator', stats: r.schedules.single });
    out.push({ name: 'schedules, 3 evaluators', stats: r.schedules.contended });
  }
  return out;
}

/** Autocommit statements plus explicit transactions (read-only ones commit without a WAL flush). */
function commits(s: PhaseStats): number {
  const autocommit = Object.entries(s.statements)
    .filter(([kind]) => !kind.startsWith('tx:'))
    .reduce((sum, [, x]) => sum + x.count, 0);
  return autocommit + s.transactions.count;
}

function costs(r: BenchResults): string {
  const rows = phases(r).map(({ name, stats: s }) => {
    const per = (x: number) => (s.items > 0 ? x / s.items : Number.NaN);
    const notifies = Object.values(s.notifications).reduce((sum, x) => sum + x, 0);
    return [
      name,
      int(s.items),
      secs(s.wallMs),
      int(s.perSecond),
      pct(s.nodeCpuMs, s.wallMs),
      s.postgresCpuMs === null ? '–' : pct(s.postgresCpuMs, s.wallMs),
      ms(per(s.nodeCpuMs)),
      s.postgresCpuMs === null ? '–' : ms(per(s.postgresCpuMs)),
      dec2(per(s.roundTrips)),
      r.config.profile ? dec2(per(commits(s))) : '–',
      int(per(s.walBytes)),
      dec2(per(notifies)),
      ms(s.eventLoopDelayP99Ms),
    ];
  });
  return table(
    [
      'phase',
      'items',
      'wall',
      'items/s',
      'node CPU',
      'pg CPU',
      'node CPU/item',
      'pg CPU/item',
      'round trips/item',
      'commits/item',
      'WAL B/item',
      'NOTIFY/item',
      'loop p99',
    ],
    rows,
    'lrrrrrrrrrrrr',
  );
}

function statementBreakdown(r: BenchResults): string {
  const blocks: string[] = [];
  for (const { name, stats: s } of phases(r)) {
    const entries = Object.entries(s.statements).sort(([, a], [, b]) => b.totalMs - a.totalMs);
    if (entries.length === 0) continue;
    const total = entries.reduce((sum, [, x]) => sum + x.totalMs, 0);
    const rows = entries.map(([kind, x]) => [
      kind,
      int(x.count),
      dec2(x.count / s.items),
      ms(x.totalMs / x.count),
      ms(x.maxMs),
      dec1(x.rows / x.count),
      pct(x.totalMs, total),
      x.errors > 0 ? int(x.errors) : '',
    ]);
    if (s.transactions.count > 0) {
      rows.push([
        '(transactions: BEGIN…COMMIT)',
        int(s.transactions.count),
        dec2(s.transactions.count / s.items),
        ms(s.transactions.totalMs / s.transactions.count),
        '',
        '',
        '',
        '',
      ]);
    }
    blocks.push(
      `${name} (${int(s.items)} items)\n` +
        indent(
          table(
            ['statement', 'count', 'per item', 'mean', 'max', 'rows/call', 'time share', 'errors'],
            rows,
            'lrrrrrrr',
          ),
        ),
    );
  }
  return blocks.join('\n\n');
}

function tableCounters(r: BenchResults): string {
  const runs: { name: string; items: number; tables: TableCounters }[] = [];
  for (const a of r.activities)
    runs.push({ name: `activities c=${a.concurrency}`, items: a.activities, tables: a.tables });
  if (r.workflows) {
    runs.push({
      name: `${r.workflows.steps}-step workflows`,
      items: r.workflows.workflows,
      tables: r.workflows.tables,
    });
  }
  if (r.overhead) {
    const o = r.overhead;
    runs.push({ name: 'overhead (0+3-step pairs)', items: o.samples + o.warmup, tables: o.tables });
  }
  if (r.latency) {
    runs.push({
      name: 'latency probes',
      items: r.latency.activities + r.latency.warmup,
      tables: r.latency.tables,
    });
  }
  if (r.longWorkflow) {
    runs.push({
      name: `${r.longWorkflow.steps}-step workflow (per step)`,
      items: r.longWorkflow.steps,
      tables: r.longWorkflow.tables,
    });
  }
  if (r.workerMemory) {
    runs.push({ name: 'memory run', items: r.workerMemory.steps, tables: r.workerMemory.tables });
  }
  if (r.heldHorizon) {
    runs.push({ name: 'held-horizon jobs', items: r.heldHorizon.offered, tables: r.heldHorizon.tables });
  }
  // The engine's own bookkeeping (migrations) is not per-item work.
  const names = [...new Set(runs.flatMap((x) => Object.keys(x.tables)))].filter(
    (t) =>
      t !== 'migrations' &&
      runs.some((x) => {
        const c = x.tables[t];
        return c !== undefined && c.inserted + c.updated + c.deleted > 0;
      }),
  );
  const rows = runs.map(({ name, items, tables }) => [
    name,
    int(items),
    ...names.map((t) => {
      const c = tables[t];
      if (!c) return '–';
      const hot = c.updated > 0 ? ` (${pct(c.hotUpdated, c.updated)} HOT)` : '';
      return `+${dec2(c.inserted / items)} ~${dec2(c.updated / items)}${hot}`;
    }),
  ]);
  return table(['run (whole engine lifetime)', 'items', ...names], rows, 'lr' + 'r'.repeat(names.length));
}

function unitCosts(r: BenchResults): string | undefined {
  const runs: { name: string; costs: WorkCost }[] = [];
  for (const a of r.activities) runs.push({ name: `activities c=${a.concurrency}`, costs: a.costs });
  if (r.workflows) runs.push({ name: `${r.workflows.steps}-step workflows`, costs: r.workflows.costs });
  if (r.overhead) runs.push({ name: 'overhead (0+3-step pairs)', costs: r.overhead.costs });
  if (r.latency) runs.push({ name: 'latency probes', costs: r.latency.costs });
  if (r.longWorkflow) {
    runs.push({ name: `${r.longWorkflow.steps}-step workflow`, costs: r.longWorkflow.costs });
  }
  if (r.workerMemory) runs.push({ name: 'memory run', costs: r.workerMemory.costs });
  if (r.heldHorizon) runs.push({ name: 'held-horizon jobs', costs: r.heldHorizon.costs });
  if (runs.length === 0) return undefined;
  const rows = runs.flatMap(({ name, costs }) =>
    costs.per.map((u, i) => [
      i === 0 ? name : '',
      `per ${u.unit}`,
      int(u.count),
      dec2(u.rowWrites),
      int(u.walBytes),
      dec2(u.roundTrips),
    ]),
  );
  return table(['run', 'unit', 'count', 'rows written', 'WAL bytes', 'round trips'], rows, 'llrrrr');
}

function verification(r: BenchResults): string {
  const lines: string[] = [];
  const show = (o: Record<string, number>) =>
    Object.entries(o)
      .map(([k, v]) => `${k} ${int(v)}`)
      .join(', ');
  for (const a of r.activities) {
    lines.push(
      `activities c=${a.concurrency}: steps ${show(a.stepStatuses)}; worker errors ${a.workerErrors}`,
    );
  }
  if (r.workflows) {
    lines.push(`workflows: runs ${show(r.workflows.runStatuses)}; worker errors ${r.workflows.workerErrors}`);
  }
  if (r.longWorkflow) {
    lines.push(`${r.longWorkflow.steps}-step workflow: runs ${show(r.longWorkflow.runStatuses)}`);
  }
  if (r.workerMemory) {
    const m = r.workerMemory;
    lines.push(`memory run: steps ${show(m.stepStatuses)}; worker errors ${m.workerErrors}`);
  }
  for (const f of r.failures) lines.push(`FAILED ${f.scenario}: ${f.error}`);
  return lines.join('\n');
}

export function renderReport(r: BenchResults): string {
  const sections = [header(r), 'Results\n' + indent(results(r))];
  const dist = distributions(r);
  if (dist) sections.push('Latency distributions\n' + indent(dist));
  const hopTable = hops(r);
  if (hopTable) sections.push(indent(hopTable).replace(/^ {2}/, ''));
  // Sections with nothing to show (e.g. BENCH_ONLY=history) are left out.
  const anyPhase = phases(r).length > 0;
  if (anyPhase) {
    sections.push(
      "Where the time goes, per item (CPU as % of one core; pg CPU = this engine's server backends;" +
        ' round trips = statements sent incl. BEGIN/COMMIT; WAL = whole server)\n' +
        indent(costs(r)),
    );
  }
  const breakdown = r.config.profile ? statementBreakdown(r) : '';
  if (breakdown !== '') {
    sections.push('Engine statements by kind (client-observed time, incl. pool wait)\n' + indent(breakdown));
  }
  const perUnit = unitCosts(r);
  if (perUnit) {
    sections.push(
      'Cost per unit of work, engine lifetime after migrations (rows = ins+upd+del, pg_stat_user_tables; WAL =' +
        " whole server, pg_wal_lsn_diff; round trips = statements sent incl. BEGIN/COMMIT; a workflow's cost" +
        ' is divided by its runs, steps and turns in turn, so "per step" includes the turns)\n' +
        indent(perUnit),
    );
  }
  if (anyPhase || r.heldHorizon) {
    sections.push(
      'Rows per item by table (+inserted ~updated; HOT = updates that wrote no index entries; pg_stat_user_tables)\n' +
        indent(tableCounters(r)),
    );
  }
  if (r.heldHorizon) sections.push('Held horizon\n' + indent(heldHorizonSection(r.heldHorizon)));
  const checks = verification(r);
  if (checks !== '') sections.push('Checks\n' + indent(checks));
  return sections.join('\n\n') + '\n';
}
