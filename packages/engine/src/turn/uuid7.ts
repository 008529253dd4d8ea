/**
 * Time-ordered ids, UUID version 7 (RFC 9562 §5.7), for every key the engine makes: run ids, signal request ids,
 * watcher ids, a child run's id. A new key lands in the rightmost leaf of its B-tree instead of a random one, so
 * the leaves an insert touches stay in memory however much history the table keeps (STORAGE.md §3.9). The
 * database makes its own (step ids) with `<schema>.uuid7()` (migration 0022), in the same layout.
 *
 * Layout, most significant bit first (RFC 9562 §6.2, **method 1: a fixed-length dedicated counter**):
 *
 *     48 bits  unix_ts_ms   milliseconds since the Unix epoch (Date.now())
 *      4 bits  ver          0b0111
 *     12 bits  counter      the counter's high 12 bits (rand_a)
 *      2 bits  var          0b10
 *     30 bits  counter      the counter's low 30 bits
 *     32 bits  random       fresh from crypto.getRandomValues for every id
 *
 * The 42-bit counter is seeded with 41 random bits (its top bit zero, the RFC's rollover guard) at the first id
 * of each millisecond and incremented by one for every further id in that millisecond, so the ids one generator
 * makes sort (as bytes, as strings, and as PostgreSQL `uuid`s) in the order they were made. When the clock stands
 * still or steps back, the generator keeps the last millisecond it used and goes on counting (the RFC's monotonic
 * error handling); should the counter ever run out (2^41 ids in one millisecond at least) it moves to the next
 * millisecond. Ids of different processes are ordered by their clocks only, to the millisecond.
 *
 * In `turn/` because the turn's hosts (the worker's and the turn fixtures') hand it to workflow code as the child
 * run id, and `turn/` is the one layer every other may import; it uses nothing but Web Crypto.
 */

/** What a generator reads: a clock in Unix milliseconds, and a source of random bytes. */
export interface Uuid7Sources {
  /** Milliseconds since the Unix epoch; default `Date.now`. */
  readonly now?: () => number;
  /** Fills the array with random bytes; default `crypto.getRandomValues`. */
  readonly random?: (bytes: Uint8Array) => void;
}

const MAX_MS = 2 ** 48 - 1;
const COUNTER_MAX = 2 ** 42 - 1;
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));
/** Random bytes are drawn this many at a time (one getRandomValues call per 64 ids or so). */
const POOL_BYTES = 256;

/**
 * A new UUIDv7 generator with its own millisecond and counter: the ids one generator returns are strictly
 * increasing. `sources` replaces the clock or the randomness (tests). The returned function throws a RangeError
 * when the clock reads a value that is not an integer in [0, 2^48) ms.
 */
export function uuid7Generator(sources: Uuid7Sources = {}): () => string {
  const now = sources.now ?? Date.now;
  const fill = sources.random ?? ((bytes: Uint8Array) => void crypto.getRandomValues(bytes));
  const pool = new Uint8Array(POOL_BYTES);
  let used = POOL_BYTES;
  const byte = (): number => {
    if (used === POOL_BYTES) {
      fill(pool);
      used = 0;
    }
    return pool[used++] as number;
  };
  let lastMs = -1;
  let counter = 0;
  const seed = (): number =>
    // 41 random bits: the low bit of one byte, then 5 whole bytes.
    (byte() & 1) * 2 ** 40 +
    byte() * 2 ** 32 +
    byte() * 2 ** 24 +
    byte() * 2 ** 16 +
    byte() * 2 ** 8 +
    byte();

  return function uuid7(): string {
    const read = now();
    if (!Number.isInteger(read) || read < 0 || read > MAX_MS) {
      throw new RangeError(`uuid7: the clock read ${String(read)}, not an integer in [0, 2^48) ms`);
    }
    if (read > lastMs) {
      lastMs = read;
      counter = seed();
    } else if (counter < COUNTER_MAX) {
      counter += 1;
    } else {
      lastMs += 1;
      counter = seed();
    }
    const ms = lastMs;
    const msHigh = Math.floor(ms / 2 ** 16); // 32 bits
    const msLow = ms % 2 ** 16;
    const cHigh = Math.floor(counter / 2 ** 30); // 12 bits
    const cLow = counter % 2 ** 30; // 30 bits
    const b = [
      (msHigh >>> 24) & 0xff,
      (msHigh >>> 16) & 0xff,
      (msHigh >>> 8) & 0xff,
      msHigh & 0xff,
      (msLow >>> 8) & 0xff,
      msLow & 0xff,
      0x70 | (cHigh >>> 8),
      cHigh & 0xff,
      0x80 | (cLow >>> 24),
      (cLow >>> 16) & 0xff,
      (cLow >>> 8) & 0xff,
      cLow & 0xff,
      byte(),
      byte(),
      byte(),
      byte(),
    ].map((x) => HEX[x] as string);
    return (
      `${b[0]}${b[1]}${b[2]}${b[3]}-${b[4]}${b[5]}-${b[6]}${b[7]}-${b[8]}${b[9]}-` +
      `${b[10]}${b[11]}${b[12]}${b[13]}${b[14]}${b[15]}`
    );
  };
}

/** The process's generator: a new UUIDv7 string (lower-case, 8-4-4-4-12), greater than every one it made before. */
export const uuid7: () => string = uuid7Generator();
