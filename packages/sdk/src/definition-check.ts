import { echoed } from './errors.js';

/**
 * What `defineWorkflow`, `defineActivity` and `defineSignal` accept as a name or a queue.
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export const DEFINITION_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

const WHAT = {
  activity: 'an activity from defineActivity()',
  workflow: 'a workflow from defineWorkflow()',
  signal: 'a signal from defineSignal()',
} as const;

/**
 * Why `value` cannot be used as a definition of `kind` — not one at all, or one whose `name` (or `queue`) is not
 * what `define*()` accepts (a copy of a definition with another name, say, which no worker could serve and no
 * filter could name) — as `{ path, message }` with `path` relative to the definition; undefined when it can.
 * For the engine, at every call that takes a definition (start, enqueue, schedules, workers, signals).
 * @internal Engine-only; import it from `@palisade/sdk/internal`.
 */
export function definitionProblem(
  value: unknown,
  kind: 'activity' | 'workflow' | 'signal',
): { readonly path: string; readonly message: string } | undefined {
  const d = value as { kind?: unknown; name?: unknown; queue?: unknown } | null | undefined;
  if (d === null || typeof d !== 'object' || d.kind !== kind)
    return { path: '', message: `must be ${WHAT[kind]}` };
  if (typeof d.name !== 'string' || !DEFINITION_NAME.test(d.name)) {
    return {
      path: 'name',
      message: `must be 1–128 characters of letters, digits, and _ . : - (as ${WHAT[kind]} has), got ${
        typeof d.name === 'string' ? `"${echoed(d.name)}"` : typeof d.name
      }`,
    };
  }
  if (kind !== 'signal' && (typeof d.queue !== 'string' || !DEFINITION_NAME.test(d.queue))) {
    return {
      path: 'queue',
      message: `must be 1–128 characters of letters, digits, and _ . : -, got ${
        typeof d.queue === 'string' ? `"${echoed(d.queue)}"` : typeof d.queue
      }`,
    };
  }
  return undefined;
}
