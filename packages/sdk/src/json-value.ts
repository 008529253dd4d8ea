/**
 * What PostgreSQL's `jsonb` and `text` can hold, checked in TypeScript before a value is sent: a value that
 * does not survive `JSON.stringify` → `JSON.parse` unchanged, or a string PostgreSQL refuses (NUL) or cannot
 * represent (a lone UTF-16 surrogate), is found here with its path. Pure; no imports, so both the error module
 * and the payload checks use it.
 *
 * @module
 */

/**
 * One problem of a value: its dotted path (`items.3.at`, empty for the root) and what is wrong.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export interface JsonProblem {
  readonly path: string;
  readonly message: string;
}

/**
 * Deepest nesting of a payload; deeper values are refused (they also overflow recursive readers).
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const MAX_PAYLOAD_DEPTH = 256;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * Why PostgreSQL cannot store `text` as it is, or `undefined` when it can: a NUL character (refused by `text`
 * and `jsonb`), or a lone UTF-16 surrogate (not Unicode: `jsonb` refuses it, `text` would store U+FFFD).
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function textProblem(text: string): string | undefined {
  const nul = text.indexOf('\u0000');
  if (nul >= 0) return `contains a NUL character (\\u0000) at index ${nul}, which PostgreSQL cannot store`;
  const lone = LONE_SURROGATE.exec(text);
  if (lone) {
    const code = (lone[0].codePointAt(0) ?? 0).toString(16).toUpperCase();
    return `contains a lone surrogate (\\u${code}) at index ${lone.index}, which is not valid Unicode`;
  }
  return undefined;
}

/**
 * `text` made storable and at most `maxChars` long: NUL characters and lone surrogates become U+FFFD, and a
 * longer text is cut with a note of its full length. For messages and stacks, which are kept, not refused.
 */
export function storableText(text: string, maxChars: number): string {
  let out = text;
  if (out.length > maxChars) {
    const note = ` … [cut: ${out.length.toLocaleString('en-US')} characters in all]`;
    out = out.slice(0, Math.max(0, maxChars - note.length));
    // Do not leave half of a surrogate pair at the cut.
    if (/[\uD800-\uDBFF]$/.test(out)) out = out.slice(0, -1);
    out += note;
  }
  if (out.includes('\u0000')) out = out.replaceAll('\u0000', '\uFFFD');
  return out.replace(LONE_SURROGATES, '\uFFFD');
}

/** A path segment as shown in messages: a key that is itself unprintable is shown escaped. */
function segment(key: string | number): string {
  if (typeof key === 'number') return String(key);
  return textProblem(key) === undefined && !key.includes('.') ? key : JSON.stringify(key).slice(1, -1);
}

function join(path: string, key: string | number): string {
  return path === '' ? segment(key) : `${path}.${segment(key)}`;
}

function describeObject(value: object): string {
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name !== '' ? `a ${name}` : 'an object with a custom prototype';
}

function hint(value: object): string {
  if (value instanceof Date)
    return 'a Date would come back as a string: pass date.toISOString() (z.iso.datetime())';
  if (value instanceof Map)
    return 'a Map would come back as {}: pass Object.fromEntries(map) or an array of pairs';
  if (value instanceof Set) return 'a Set would come back as {}: pass [...set]';
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer)
    return `${describeObject(value)} would not come back as one: pass base64 text`;
  return `${describeObject(value)} would come back as a plain object or change: pass plain objects, arrays, strings, finite numbers, booleans and null`;
}

/**
 * Every way `value` would not survive the JSON round trip into PostgreSQL unchanged, up to `maxProblems`.
 * Accepted: `null`, booleans, finite numbers, storable strings, arrays and plain objects (prototype `Object`
 * or `null`) of these, no cycles, at most {@link MAX_PAYLOAD_DEPTH} deep. An `undefined` object property is
 * accepted (JSON drops it, so reading it back gives `undefined` again), and so is an `undefined` root (stored
 * as `null`); an `undefined` array element is refused (it would come back as `null`).
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function jsonProblems(value: unknown, maxProblems = 5): JsonProblem[] {
  const problems: JsonProblem[] = [];
  const ancestors = new Set<object>();
  const visit = (v: unknown, path: string, depth: number, inArray: boolean): void => {
    if (problems.length >= maxProblems) return;
    const add = (message: string) => problems.push({ path, message });
    switch (typeof v) {
      case 'string': {
        const problem = textProblem(v);
        if (problem) add(problem);
        return;
      }
      case 'number':
        if (!Number.isFinite(v)) add(`${v} is not JSON (it would be stored as null)`);
        return;
      case 'boolean':
        return;
      case 'undefined':
        if (inArray) add('undefined is not JSON (in an array it would come back as null)');
        return;
      case 'bigint':
        add(`${v}n is a BigInt, which is not JSON: pass it as a string or a number`);
        return;
      case 'symbol':
        add('a Symbol is not JSON');
        return;
      case 'function':
        add('a function is not JSON (it would be dropped)');
        return;
    }
    if (v === null) return;
    const obj = v as object;
    if (ancestors.has(obj)) {
      add('is a circular reference (the value contains itself)');
      return;
    }
    if (depth >= MAX_PAYLOAD_DEPTH) {
      add(`is nested deeper than ${MAX_PAYLOAD_DEPTH} levels`);
      return;
    }
    ancestors.add(obj);
    try {
      if (Array.isArray(obj)) {
        for (let i = 0; i < obj.length; i++) visit(obj[i], join(path, i), depth + 1, true);
        return;
      }
      const proto = Object.getPrototypeOf(obj) as unknown;
      if (proto !== Object.prototype && proto !== null) {
        add(`${hint(obj)}`);
        return;
      }
      if (typeof (obj as { toJSON?: unknown }).toJSON === 'function') {
        add('has a toJSON method, so it would not come back as it is');
        return;
      }
      for (const key of Object.keys(obj)) {
        const keyProblem = textProblem(key);
        if (keyProblem) {
          problems.push({ path: join(path, key), message: `its key ${keyProblem}` });
          continue;
        }
        visit((obj as Record<string, unknown>)[key], join(path, key), depth + 1, false);
      }
      if (Object.getOwnPropertySymbols(obj).some((s) => Object.prototype.propertyIsEnumerable.call(obj, s)))
        add('has Symbol keys, which JSON drops');
    } finally {
      ancestors.delete(obj);
    }
  };
  visit(value, '', 0, false);
  return problems;
}

/** Size in bytes of `text` encoded as UTF-8 (a lone surrogate counts as the 3 bytes of U+FFFD). */
export function utf8Bytes(text: string): number {
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (
      c >= 0xd800 &&
      c <= 0xdbff &&
      i + 1 < text.length &&
      (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00
    ) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}
