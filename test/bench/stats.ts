/** Small numeric helpers: percentiles and summaries of latency samples (all in ms). */

export interface LatencySummary {
  readonly samples: number;
  readonly minMs: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  readonly meanMs: number;
}

/** The q-quantile (0 ≤ q ≤ 1) of ascending `sorted`, linearly interpolated; NaN when empty. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const position = (sorted.length - 1) * q;
  const below = Math.floor(position);
  const above = Math.ceil(position);
  const low = sorted[below] as number;
  const high = sorted[above] as number;
  return low + (high - low) * (position - below);
}

export function summarize(samples: readonly number[]): LatencySummary {
  const sorted = [...samples].sort((a, b) => a - b);
  const sum = sorted.reduce((total, x) => total + x, 0);
  return {
    samples: sorted.length,
    minMs: round(sorted[0] ?? Number.NaN),
    p50Ms: round(quantile(sorted, 0.5)),
    p90Ms: round(quantile(sorted, 0.9)),
    p99Ms: round(quantile(sorted, 0.99)),
    maxMs: round(sorted[sorted.length - 1] ?? Number.NaN),
    meanMs: round(sorted.length === 0 ? Number.NaN : sum / sorted.length),
  };
}

/** Rounded to `digits` decimals (for reports; keeps JSON readable). */
export function round(value: number, digits = 2): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** `count / (ms / 1000)`, rounded to a whole number per second. */
export function perSecond(count: number, ms: number): number {
  return ms > 0 ? Math.round((count * 1000) / ms) : Number.NaN;
}
