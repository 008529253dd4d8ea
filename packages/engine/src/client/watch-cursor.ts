import { InvalidOptionsError } from '@palisade/sdk';
import { echoed } from '@palisade/sdk/internal';
import type { WatchPosition } from '../queries/watch-run.js';

/**
 * The cursors of `handle.watch()`: a place in one run's history, opaque to callers, checked when given back.
 * @module
 */

const BIGINT_MAX = 9_223_372_036_854_775_807n;
/** The times a cursor may hold (µs since the epoch): years 1 to 9999, well inside PostgreSQL's timestamptz range. */
const CURSOR_MIN_AT_US = -62_135_596_800_000_000n;
const CURSOR_MAX_AT_US = 253_402_300_799_999_999n;

/** `w1.<run id, hex>.<at µs>.<rank>.<ord>.<id>`: a place in one run's history (see readRunEventsAfter). */
export function encodeCursor(runId: string, e: WatchPosition): string {
  return `w1.${runId.replaceAll('-', '')}.${e.atUs}.${e.rank}.${e.ord}.${e.id}`;
}

/** The order of history: (at, rank, ord, id), as readRunEventsAfter sorts. */
export function comparePositions(a: WatchPosition, b: WatchPosition): number {
  const at = BigInt(a.atUs) - BigInt(b.atUs);
  if (at !== 0n) return at < 0n ? -1 : 1;
  if (a.rank !== b.rank) return a.rank - b.rank;
  const ord = BigInt(a.ord) - BigInt(b.ord);
  if (ord !== 0n) return ord < 0n ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * The place `cursor` (from {@link encodeCursor}) names in run `runId`'s history.
 * @throws InvalidOptionsError naming `after` when it is not a cursor of this run, or a number in it is out of range.
 */
export function decodeCursor(runId: string, cursor: string): WatchPosition {
  const m = /^w1\.([0-9a-f]{32})\.(-?\d{1,19})\.(\d{1,2})\.(-?\d{1,19})\.(\S{1,80})$/.exec(cursor);
  if (!m) {
    throw new InvalidOptionsError('watch options', [
      { path: 'after', message: `is not a cursor from an event watch() yielded: ${echoed(cursor)}` },
    ]);
  }
  if (m[1] !== runId.replaceAll('-', '').toLowerCase()) {
    throw new InvalidOptionsError('watch options', [
      { path: 'after', message: `is a cursor of another run's events, not of run ${echoed(runId)}` },
    ]);
  }
  // The numbers go to bigint parameters (and a timestamp): out of their range, the database would refuse the read
  // with a raw error instead of naming the cursor.
  const atUs = BigInt(m[2]!);
  const ord = BigInt(m[4]!);
  if (atUs < CURSOR_MIN_AT_US || atUs > CURSOR_MAX_AT_US || ord < -BIGINT_MAX - 1n || ord > BIGINT_MAX) {
    throw new InvalidOptionsError('watch options', [
      {
        path: 'after',
        message: `is not a cursor from an event watch() yielded (a number is out of range): ${cursor.slice(0, 80)}`,
      },
    ]);
  }
  return { atUs: m[2]!, rank: Number(m[3]), ord: m[4]!, id: m[5]! };
}
