/**
 * The options renamed to carry their unit (README, "What changed"), and where an old name is answered with the
 * new one: only in an options object whose schema takes the new name (`delay` on `client.start`, never on
 * `ctx.run`, which has no `delayMs`), never in a payload checked against a user's schema.
 * @module
 */

/** Old option name → new one. Only ever a hint: the old name stays refused. */
export const RENAMED_OPTIONS: Readonly<Record<string, string>> = Object.freeze({
  delay: 'delayMs',
  retention: 'retentionMs',
  olderThan: 'olderThanMs',
  every: 'everyMs',
  period: 'periodMs',
  timeout: 'timeoutMs',
});

/**
 * What was parsed, for the rename hints of {@link formatIssues}: the options schema (a zod 4 schema) and the value
 * given to it.
 */
export interface ParsedOptions {
  readonly schema: unknown;
  readonly input: unknown;
}

/** What a zod 4 schema's definition holds that the walk below reads. */
interface SchemaDef {
  readonly type?: string;
  readonly shape?: Record<string, unknown>;
  readonly innerType?: unknown;
  readonly in?: unknown;
  readonly element?: unknown;
  readonly options?: readonly unknown[];
  readonly left?: unknown;
  readonly right?: unknown;
}

function defOf(schema: unknown): SchemaDef | undefined {
  const zod = (schema as { _zod?: { def?: SchemaDef } } | null | undefined)?._zod;
  return zod?.def;
}

/** The object shapes `schema` may parse a value at `path` with (through optional, default, pipe, union…). */
function shapesAt(schema: unknown, path: readonly PropertyKey[], depth = 0): Record<string, unknown>[] {
  const def = defOf(schema);
  if (!def || depth > 32) return [];
  const next = (inner: unknown, rest = path) => shapesAt(inner, rest, depth + 1);
  switch (def.type) {
    case 'object': {
      if (path.length === 0) return def.shape ? [def.shape] : [];
      const [key, ...rest] = path;
      return typeof key === 'string' && def.shape && Object.hasOwn(def.shape, key)
        ? next(def.shape[key], rest)
        : [];
    }
    case 'array':
      return path.length > 0 && typeof path[0] === 'number' ? next(def.element, path.slice(1)) : [];
    case 'pipe':
      return next(def.in);
    case 'union':
      return (def.options ?? []).flatMap((o) => next(o));
    case 'intersection':
      return [...next(def.left), ...next(def.right)];
    default:
      return def.innerType !== undefined ? next(def.innerType) : [];
  }
}

/** The value at `path` of `input`, when every step is an object. */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/**
 * For an unknown key of an options object at `path` (a zod `unrecognized_keys` issue): the old names among
 * `keys` whose new name that object's schema takes, each with its new name, and whether the new name was left out
 * of the value — then the schema's complaint that the new name is missing says nothing the hint does not.
 */
export function renamesAt(
  parsed: ParsedOptions,
  path: readonly PropertyKey[],
  keys: readonly unknown[],
): { readonly from: string; readonly to: string; readonly missing: boolean }[] {
  const shapes = shapesAt(parsed.schema, path);
  const given = valueAt(parsed.input, path);
  return keys
    .filter((k): k is string => typeof k === 'string' && Object.hasOwn(RENAMED_OPTIONS, k))
    .map((from) => ({ from, to: RENAMED_OPTIONS[from] as string }))
    .filter(({ to }) => shapes.some((shape) => Object.hasOwn(shape, to)))
    .map(({ from, to }) => ({ from, to, missing: valueAt(given, [to]) === undefined }));
}
