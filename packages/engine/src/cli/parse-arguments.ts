import { InvalidArgumentError } from 'commander';
import { parseDuration } from '@palisade/sdk';

/** A commander parser for a whole number in [min, max]; a bad value is a usage error (exit 2). */
export function wholeNumber(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || n < min || n > max) {
      throw new InvalidArgumentError(`must be a whole number from ${min} to ${max}.`);
    }
    return n;
  };
}

/** A commander parser collecting a repeatable option into an array. */
export function collect(value: string, previous: readonly string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * A commander parser for a duration such as `30d`, `12h`, `90m`, `45s` or `250ms` (decimals allowed: `1.5d`);
 * a bad value is a usage error (exit 2). The range is left to the engine option it feeds. @returns ms.
 */
export function duration(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined) {
    throw new InvalidArgumentError(
      'must be a duration: a number and a unit, ms s m h or d (e.g. 30d, 12h, 90m).',
    );
  }
  return ms;
}
