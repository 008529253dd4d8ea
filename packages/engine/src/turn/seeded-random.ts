/**
 * The workflow's deterministic random numbers: `Math.random()` in workflow code draws from here, seeded by the
 * run's id.
 */
import { sha256 } from '@noble/hashes/sha2';

/**
 * A deterministic source of numbers in [0, 1) seeded from `seed` (a run's id): what `Math.random()` returns in
 * workflow code, so that a replay of the run's code draws the same numbers in the same order. The generator is
 * sfc32 (a small, fast, well-tested 128-bit-state PRNG); its state is the first 16 bytes of SHA-256(seed) (UTF-8; @noble/hashes), so
 * runs with different ids draw unrelated sequences. Not for secrets (use `ctx.uuid()` or an activity).
 */
export function seededRandom(seed: string): () => number {
  const hash = sha256(new TextEncoder().encode(seed));
  const digest = new DataView(hash.buffer, hash.byteOffset, hash.byteLength);
  let a = digest.getUint32(0, true);
  let b = digest.getUint32(4, true);
  let c = digest.getUint32(8, true);
  let d = digest.getUint32(12, true);
  return () => {
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return (t >>> 0) / 4_294_967_296;
  };
}
