import { InvalidArgumentError } from 'commander';

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
