/** JSON values as PostgreSQL's jsonb gives them back: what a turn delivers for a value it did not read. */

/**
 * `value` as PostgreSQL's jsonb hands it back once stored and read: what `JSON.stringify` keeps (undefined as
 * null, `toJSON` applied), with every object's keys in jsonb's order (shorter first, then by their UTF-8 bytes;
 * JavaScript then lists integer-like keys first, as it does for any parsed object). A turn that delivers a value it
 * has not read from the database (a fused step) delivers this, so that its code sees what a replay will read.
 */
export function asStoredJson(value: unknown): unknown {
  return sortKeys(JSON.parse(JSON.stringify(value ?? null)) as unknown);
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  const utf8 = new TextEncoder();
  const entries = Object.entries(value as Record<string, unknown>).map(
    ([key, v]) => [key, utf8.encode(key), sortKeys(v)] as const,
  );
  entries.sort(([, a], [, b]) => a.length - b.length || compareBytes(a, b));
  return Object.fromEntries(entries.map(([key, , v]) => [key, v]));
}

/** `Buffer.compare` of two byte strings of the same length: by their first differing byte. */
function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < a.length; i++) {
    const d = (a[i] as number) - (b[i] as number);
    if (d !== 0) return d;
  }
  return 0;
}
