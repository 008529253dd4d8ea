import { z } from 'zod';

/**
 * A duration: a number of milliseconds, or a string such as `'250ms'`, `'30s'`, `'5m'`, `'2h'`, `'1d'`
 * (decimals allowed: `'1.5s'`). Parsed in one place, {@link toMs}.
 */
export type Duration = number | string;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PATTERN = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/;

/** Show a rejected value in an error message: `NaN` and `Infinity` as themselves (JSON would print `null`). */
function formatValue(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Convert a {@link Duration} to whole milliseconds.
 * @returns the duration in ms, or `undefined` for a string that is not a duration, or a negative or
 * non-finite number.
 */
export function parseDuration(value: Duration): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? Math.round(value) : undefined;
  const match = PATTERN.exec(value);
  if (!match) return undefined;
  return Math.round(Number(match[1]) * (UNIT_MS[match[2] as string] ?? NaN));
}

/**
 * Convert a {@link Duration} to whole milliseconds.
 * @throws TypeError naming `what` when the value is not a valid duration.
 */
export function toMs(value: Duration, what = 'duration'): number {
  const ms = parseDuration(value);
  if (ms === undefined) {
    throw new TypeError(
      `${what}: ${formatValue(value)} is not a duration (use ms, or '250ms' '30s' '5m' '2h' '1d')`,
    );
  }
  return ms;
}

/** zod schema of a {@link Duration}, transformed to milliseconds, with a readable error. */
export const durationMs = z
  // The union's own message: without it NaN, Infinity and non-string values fail with a bare "Invalid input".
  .union([z.number(), z.string()], { error: (issue) => notADuration(issue.input) })
  .transform((value, ctx) => {
    const ms = parseDuration(value);
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: notADuration(value) });
      return z.NEVER;
    }
    return ms;
  });

function notADuration(value: unknown): string {
  return `${formatValue(value)} is not a duration (a non-negative number of ms, or '250ms' '30s' '5m' '2h' '1d')`;
}
