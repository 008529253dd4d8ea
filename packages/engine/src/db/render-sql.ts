/**
 * The engine's own rendering of its `sql` templates to PostgreSQL text and parameters, in place of drizzle's
 * `PgDialect.sqlToQuery` on the hot path.
 *
 * Why: a worker renders a statement per claim, completion and turn commit, and a turn commit is ~30 KB of SQL in
 * ~2,000 template chunks. drizzle's renderer tests every chunk against a dozen entity classes (`is()` walks each
 * value's prototype chain per class) and merges one `{ sql, params }` object per chunk; a V8 profile of a worker
 * running three-step workflows (peer harness, `--scenario workflow`) put ~11 % of all its samples (a fifth of its
 * busy time) in that rendering. This one handles exactly the chunks the engine writes — text, nested templates,
 * `sql.identifier` names, arrays as parenthesized lists and plain values as parameters — and hands any other
 * chunk (a drizzle table, column, `sql.param`, placeholder, subquery, or a template with `inlineParams()`) back to
 * drizzle for the whole statement.
 *
 * The text and parameters are exactly drizzle's (`render-sql.test.ts`, and every turn commit's shape in
 * `turn-commit/statement.test.ts`).
 * @module
 */
import { Name, SQL, StringChunk } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';

/** A statement as the driver takes it. */
export interface RenderedSql {
  readonly sql: string;
  readonly params: unknown[];
}

const dialect = new PgDialect();

/** Thrown inside the walk when a chunk is not one this renderer handles: drizzle renders the statement instead. */
class UnsupportedChunk extends Error {}
const UNSUPPORTED = new UnsupportedChunk('a chunk drizzle renders');

/** Render `query` to text with `$n` parameters (numbered from 1 in order of appearance) and their values. Pure. */
export function renderSql(query: SQL): RenderedSql {
  const params: unknown[] = [];
  try {
    const text = renderChunk(query, params);
    return { sql: text, params };
  } catch (error) {
    if (error !== UNSUPPORTED) throw error;
    // drizzle's rendering (only chunks the engine never writes get here), without its `typings`.
    const { sql: text, params: values } = dialect.sqlToQuery(query);
    return { sql: text, params: values };
  }
}

function renderChunks(chunks: readonly unknown[], params: unknown[]): string {
  let text = '';
  for (const chunk of chunks) text += renderChunk(chunk, params);
  return text;
}

function renderChunk(chunk: unknown, params: unknown[]): string {
  if (chunk instanceof StringChunk) {
    const value = chunk.value;
    return value.length === 1 ? (value[0] as string) : value.join('');
  }
  if (chunk instanceof SQL) {
    // `inlineParams()` (drizzle writes the values into the text): private in drizzle's types, never used here.
    if ((chunk as unknown as { shouldInlineParams: boolean }).shouldInlineParams) throw UNSUPPORTED;
    return renderChunks(chunk.queryChunks, params);
  }
  if (chunk === undefined) return '';
  const type = typeof chunk;
  if (chunk === null || type === 'string' || type === 'number' || type === 'bigint' || type === 'boolean') {
    params.push(chunk);
    return `$${params.length}`;
  }
  if (Array.isArray(chunk)) {
    let text = '(';
    for (let i = 0; i < chunk.length; i++) {
      if (i > 0) text += ', ';
      text += renderChunk(chunk[i], params);
    }
    return `${text})`;
  }
  if (chunk instanceof Name) return `"${chunk.value.replace(/"/g, '""')}"`;
  if (type !== 'object') throw UNSUPPORTED; // a function or a symbol: drizzle decides
  // Any drizzle entity (its class carries drizzle's entity kind) or wrapper of SQL is drizzle's to render; any other
  // object (a Date, a Buffer, a plain object) is a parameter value, as drizzle treats it.
  if (typeof (chunk as { getSQL?: unknown }).getSQL === 'function' || isDrizzleEntity(chunk))
    throw UNSUPPORTED;
  params.push(chunk);
  return `$${params.length}`;
}

const ENTITY_KIND = Symbol.for('drizzle:entityKind');

function isDrizzleEntity(value: object): boolean {
  for (let c = (value as { constructor?: unknown }).constructor; c; c = Object.getPrototypeOf(c)) {
    if (typeof c === 'function' && ENTITY_KIND in c) return true;
  }
  return false;
}
