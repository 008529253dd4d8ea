/** Random order for tests that race many writers: which one goes first must not be the order they were made in. */

/** A copy of `items` in a uniformly random order (Fisher–Yates on `Math.random`); `items` is left as it was. */
export function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}
