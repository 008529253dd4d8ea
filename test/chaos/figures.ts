/** The figures table of `pnpm chaos` (research/fencing-semantics.md §3.6), from the scenarios' reports. */
import { CHECKS } from './checker.js';
import { failed, percentile, type ScenarioReport } from './harness.js';

const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);
const round = (n: number): string => (Number.isFinite(n) ? String(Math.round(n)) : '–');
const dist = (values: readonly number[]): string =>
  values.length === 0
    ? '–'
    : `${round(percentile(values, 50))} / ${round(percentile(values, 99))} / ${round(Math.max(...values))} (n=${values.length})`;

/** Metric-name prefixes printed as one figures row per key (`prefix` + key), e.g. one row per DB clock jump size. */
const KEYED = ['dbJumpExposure:', 'dbJumpWindowMs:'] as const;

/** A heading row and one row per key of the metrics named `prefix` + key; none if no scenario sampled them. */
function byKey(
  reports: readonly ScenarioReport[],
  prefix: (typeof KEYED)[number],
  heading: string,
  show: (values: readonly number[]) => string,
): [string, string][] {
  const keyed = new Map<string, number[]>();
  for (const [k, v] of reports.flatMap((r) => Object.entries(r.metrics))) {
    if (k.startsWith(prefix))
      keyed.set(k.slice(prefix.length), [...(keyed.get(k.slice(prefix.length)) ?? []), ...v]);
  }
  if (keyed.size === 0) return [];
  return [[heading, ''], ...[...keyed].map(([k, v]): [string, string] => [`  ${k}`, show(v)])];
}

/** One row per figure, one column per scenario plus a total. */
export function figuresTable(reports: readonly ScenarioReport[]): string {
  const all = (metric: string): number[] => reports.flatMap((r) => r.metrics[metric] ?? []);
  const grants = reports.flatMap((r) => r.check.grantsPerStep);
  const rows: [string, string][] = [
    ['scenarios', reports.map((r) => r.name).join(', ')],
    [
      'iterations',
      reports.map((r) => r.iterations).join(' + ') + ` = ${sum(reports.map((r) => r.iterations))}`,
    ],
    [
      'steps checked / runs',
      `${sum(reports.map((r) => r.check.steps))} / ${sum(reports.map((r) => r.check.runs))}`,
    ],
    ['fenced effects committed', String(sum(reports.map((r) => r.check.fencedEffects)))],
    [
      'faults injected',
      `${sum(reports.flatMap((r) => Object.values(r.faults)))} (` +
        reports
          .flatMap((r) => Object.entries(r.faults))
          .map(([k, v]) => `${k}: ${v}`)
          .join(', ') +
        ')',
    ],
    [
      'stale fenced writes attempted / rejected',
      `${sum(reports.map((r) => r.check.staleAttempted))} / ${sum(reports.map((r) => r.check.staleRejected))}`,
    ],
    ...CHECKS.map((c): [string, string] => [
      `C-${c} violations`,
      String(sum(reports.map((r) => r.check.violations[c]))),
    ]),
    ['scenario assertions failed', String(sum(reports.map((r) => r.failures.length)))],
    ['unfenced writes by zombies (reported)', String(sum(reports.map((r) => r.check.unfencedByZombies)))],
    ['abort latency after losing a lease p50/p99/max ms', dist(all('abortLatencyMs'))],
    ...reports
      .filter((r) => (r.metrics.abortLatencyMs ?? []).length > 0)
      .map((r): [string, string] => [`  ${r.name}`, dist(r.metrics.abortLatencyMs ?? [])]),
    [
      'abort lead before DB expiry, min / p1 / p50 ms',
      all('abortLeadMs').length
        ? `${round(Math.min(...all('abortLeadMs')))} / ${round(percentile(all('abortLeadMs'), 1))} / ` +
          `${round(percentile(all('abortLeadMs'), 50))} (n=${all('abortLeadMs').length})`
        : '– (no partition scenario ran)',
    ],
    ['reclaim latency after SIGKILL p50/p99/max ms', dist(all('reclaimLatencyMs'))],
    ...byKey(
      reports,
      'dbJumpExposure:',
      'unfenced writes after a DB clock jump, by J: total (n, max)',
      (v) => (v.length ? `${sum(v)} (n=${v.length}, max ${Math.max(...v)})` : '–'),
    ),
    ...byKey(
      reports,
      'dbJumpWindowMs:',
      'DB expiry → owner stops after a DB clock jump, p50/p99/max ms',
      dist,
    ),
    [
      'attempts (grants) per step mean / max',
      grants.length ? `${(sum(grants) / grants.length).toFixed(2)} / ${Math.max(...grants)}` : '–',
    ],
    ['wall time', `${(sum(reports.map((r) => r.durationMs)) / 1000).toFixed(1)} s`],
    ['result', reports.some(failed) ? 'FAIL' : 'PASS'],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  const lines = rows.map(([k, v]) => `| ${k.padEnd(width)} | ${v} |`);
  const perScenario = reports.map((r) => {
    const violations = sum(Object.values(r.check.violations));
    const extra = Object.entries(r.metrics)
      .filter(
        ([k]) =>
          !['abortLatencyMs', 'abortLeadMs', 'reclaimLatencyMs'].includes(k) &&
          !KEYED.some((prefix) => k.startsWith(prefix)),
      )
      .map(([k, v]) => `${k} ${dist(v)}`);
    return (
      `  ${failed(r) ? 'FAIL' : 'ok  '} ${r.name}: ${r.iterations} iterations, seed ${r.seed}, ` +
      `${violations} violations, ${(r.durationMs / 1000).toFixed(1)} s` +
      (extra.length ? `; ${extra.join('; ')}` : '') +
      (r.failures.length ? `\n       ${r.failures.join('\n       ')}` : '') +
      (r.historyFile ? `\n       history: ${r.historyFile}` : '')
    );
  });
  return [
    `| ${'figure'.padEnd(width)} | value |`,
    `|${'-'.repeat(width + 2)}|-------|`,
    ...lines,
    '',
    ...perScenario,
  ].join('\n');
}
