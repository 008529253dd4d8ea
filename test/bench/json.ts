/**
 * JSON laid out the way prettier lays it out (objects expanded, arrays of primitives on one line when they fit
 * in the print width), so the results file passes `prettier --check bench` without a formatter dependency.
 */

const PRINT_WIDTH = 110;
const INDENT = '  ';

type Primitive = null | boolean | number | string;
type Json = Primitive | Json[] | { [key: string]: Json };

function isPrimitive(value: Json): value is Primitive {
  return value === null || typeof value !== 'object';
}

function render(value: Json, depth: number, prefixLength: number): string {
  if (isPrimitive(value)) return JSON.stringify(value);
  const inner = INDENT.repeat(depth + 1);
  const outer = INDENT.repeat(depth);
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    if (value.every(isPrimitive)) {
      const inline = `[${value.map((v) => JSON.stringify(v)).join(', ')}]`;
      if (prefixLength + inline.length + 1 <= PRINT_WIDTH) return inline;
    }
    return `[\n${value.map((v) => inner + render(v, depth + 1, inner.length)).join(',\n')}\n${outer}]`;
  }
  const entries = Object.entries(value);
  if (entries.length === 0) return '{}';
  const lines = entries.map(([key, v]) => {
    const head = `${inner}${JSON.stringify(key)}: `;
    return head + render(v, depth + 1, head.length);
  });
  return `{\n${lines.join(',\n')}\n${outer}}`;
}

/** `value` as formatted JSON text with a trailing newline (undefined properties are left out, as JSON.stringify does). */
export function formatJson(value: unknown): string {
  const plain = JSON.parse(JSON.stringify(value)) as Json;
  return render(plain, 0, 0) + '\n';
}
