/**
 * mulberry32: a tiny, well-distributed 32-bit PRNG — the examples' data generators draw from it so that running one
 * again rewrites the same bytes. Enough for test data, never for secrets.
 * @returns a function giving the next number in [0, 1) of the sequence `seed` starts.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
