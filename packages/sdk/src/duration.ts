import { z } from 'zod';
import { InvalidOptionsError, echoed } from './errors.js';

/**
 * A duration: a number of milliseconds, or a string such as `'250ms'`, `'30s'`, `'5m'`, `'2h'`, `'1d'`
 * (decimals allowed: `'1.5s'`). Parsed in one place, {@link parseDuration}; every duration option of every
 * public call accepts the same forms.
 */
export type Duration = number | string;

/**
 * The longest duration an option may hold: 2,147,483,647 ms (about 24.8 days). Node's timers hold at most this
 * (a longer one fires after 1 ms) and the engine stores durations as 32-bit integers.
 */
export const MAX_DURATION_MS = 2_147_483_647;

/**
 * The longest durable sleep (`ctx.sleep`): 10 years. A durable timer is a due time in the database, not a Node
 * timer, so it may be longer than {@link MAX_DURATION_MS}.
 */
export const MAX_SLEEP_MS = 10 * 365 * 86_400_000;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PATTERN = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/;

/** Show a rejected value in an error message: `NaN` and `Infinity` as themselves (JSON would print `null`). */
function formatValue(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (typeof value === 'string') return JSON.stringify(echoed(value, 40));
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Convert a {@link Duration} to whole milliseconds.
 * @returns the duration in ms, or `undefined` for a string that is not a duration, or a negative or
 * non-finite number. The range is not checked here (see {@link toMs} and {@link durationMs}).
 */
export function parseDuration(value: Duration): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? Math.round(value) : undefined;
  if (typeof value !== 'string') return undefined;
  const match = PATTERN.exec(value);
  if (!match) return undefined;
  return Math.round(Number(match[1]) * (UNIT_MS[match[2] as string] ?? NaN));
}

/** Why `value` is not a duration of at most `maxMs`, or `undefined` when it is one. */
function durationProblem(value: unknown, maxMs: number): string | undefined {
  const ms = typeof value === 'number' || typeof value === 'string' ? parseDuration(value) : undefined;
  if (ms === undefined) return notADuration(value);
  if (ms > maxMs) {
    const days = maxMs >= 86_400_000 ? ` (about ${(maxMs / 86_400_000).toFixed(1)} days)` : '';
    return `${formatValue(value)} is too long: must be ≤ ${maxMs.toLocaleString('en-US')} ms${days}`;
  }
  return undefined;
}

/**
 * Convert a {@link Duration} to whole milliseconds, within `[0, maxMs]`.
 * @param what names the option in the error, e.g. `sleep duration in workflow settle`.
 * @param maxMs @defaultValue {@link MAX_DURATION_MS}
 * @throws InvalidOptionsError naming `what` when the value is not a duration or is out of range.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function toMs(value: Duration, what = 'duration', maxMs: number = MAX_DURATION_MS): number {
  const problem = durationProblem(value, maxMs);
  if (problem !== undefined) throw new InvalidOptionsError(what, [{ path: '', message: problem }]);
  return parseDuration(value) as number;
}

/**
 * zod schema of a {@link Duration} of at most `maxMs`, transformed to milliseconds, with a readable error.
 * @param maxMs @defaultValue {@link MAX_DURATION_MS}
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function durationSchema(maxMs: number = MAX_DURATION_MS) {
  return (
    z
      // The union's own message: without it NaN, Infinity and non-string values fail with a bare "Invalid input".
      .union([z.number(), z.string()], { error: (issue) => notADuration(issue.input) })
      .transform((value, ctx) => {
        const problem = durationProblem(value, maxMs);
        if (problem !== undefined) {
          ctx.addIssue({ code: 'custom', message: problem });
          return z.NEVER;
        }
        return parseDuration(value) as number;
      })
  );
}

/**
 * zod schema of a {@link Duration} within `[0, MAX_DURATION_MS]`, transformed to milliseconds.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const durationMs = durationSchema();

function notADuration(value: unknown): string {
  return `${formatValue(value)} is not a duration (a non-negative number of ms, or '250ms' '30s' '5m' '2h' '1d')`;
}
