import { z } from 'zod';
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  type ActivityDefinition,
  type WorkflowDefinition,
} from '@palisade/sdk';
import {
  checkPayload,
  durationMs,
  echoed,
  parseOptions,
  instantProblem,
  textProblem,
  validate,
  definitionProblem,
} from '@palisade/sdk/internal';
import type { NewScheduleRow, ScheduleRunOptions } from '../queries/schedule-rows.js';
import { activityRunParamsOf } from './evaluate-schedules.js';
import {
  cronOf,
  isKnownTimezone,
  nextTickAfter,
  type CatchupPolicy,
  type TickSpec,
} from './schedule-ticks.js';
import type { ScheduleOptions } from './schedule-types.js';

const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;
const storable = (s: string) => textProblem(s) === undefined;
const idSchema = z
  .string()
  .min(1, 'must not be empty')
  .max(200, 'must be ≤ 200 characters')
  .refine(storable, 'must be storable text (no NUL, no lone surrogate)');
const catchupSchema = z.union(
  [
    z.literal('none'),
    z.literal('latest'),
    z
      .object({ all: z.object({ windowMs: durationMs.pipe(z.number().min(1, 'must be > 0')) }).strict() })
      .strict(),
  ],
  { error: () => "must be 'none', 'latest' or { all: { windowMs } }" },
);
const patchShape = {
  cron: z.string().min(1).max(500).refine(storable, 'must be storable text').optional(),
  everyMs: durationMs.pipe(z.number().min(1_000, 'must be ≥ 1 s')).optional(),
  timezone: z.string().min(1).max(100).optional(),
  workflow: z.any().optional(),
  activity: z.any().optional(),
  input: z.unknown().optional(),
  overlap: z.enum(['skip', 'buffer-one', 'allow-all', 'cancel-previous']).optional(),
  catchup: catchupSchema.optional(),
  queue: z.string().regex(NAME, 'must be 1–128 letters, digits, _ . : -').optional(),
  priority: z.number().int('must be a whole number').min(-1000).max(1000).optional(),
};
export const createSchema = z
  .object({ id: idSchema, paused: z.boolean().optional(), ...patchShape })
  .strict();
export const patchSchema = z.object(patchShape).strict();
const backfillSchema = z
  .object({
    from: z.union([z.date(), z.string(), z.number()]),
    to: z.union([z.date(), z.string(), z.number()]),
  })
  .strict();

export type Issue = { path: string; message: string };

/** Parse with `schema`. @throws InvalidOptionsError naming each bad option, `where` naming the call. */
export function parse<S extends z.ZodType>(schema: S, value: unknown, where: string): z.output<S> {
  return parseOptions(schema, value, where);
}

/** The tick spec from `cron`/`everyMs`/`timezone`, with an issue for each problem. */
export function tickSpec(
  o: { cron?: string | undefined; everyMs?: number | undefined; timezone?: string | undefined },
  issues: Issue[],
): TickSpec | undefined {
  if (o.cron !== undefined && o.everyMs !== undefined) {
    issues.push({ path: 'cron', message: 'give either cron or everyMs, not both' });
    return undefined;
  }
  if (o.cron === undefined && o.everyMs === undefined) {
    issues.push({ path: 'cron', message: 'give cron (a cron expression) or everyMs (an interval)' });
    return undefined;
  }
  if (o.everyMs !== undefined) {
    if (o.timezone !== undefined) {
      issues.push({ path: 'timezone', message: 'applies only to cron schedules (everyMs ticks in UTC ms)' });
    }
    return { kind: 'every', everyMs: o.everyMs };
  }
  const timezone = o.timezone ?? 'UTC';
  if (!isKnownTimezone(timezone)) {
    issues.push({
      path: 'timezone',
      message: `"${echoed(timezone)}" is not an IANA time zone (e.g. 'Europe/Berlin')`,
    });
    return undefined;
  }
  const cron = o.cron as string;
  try {
    const spec: TickSpec = { kind: 'cron', cron, timezone };
    cronOf(cron, timezone);
    nextTickAfter(spec, Date.now()); // an expression that never ticks (Feb 30) is refused here, not at evaluation
    return spec;
  } catch (error) {
    const why = error instanceof Error ? error.message : String(error);
    issues.push({
      path: 'cron',
      message: `"${echoed(cron)}" is not a valid cron expression: ${why}`,
    });
    return undefined;
  }
}

/** A schedule's target: its kind and definition. */
export type ScheduleTarget =
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  | { readonly kind: 'workflow'; readonly def: WorkflowDefinition<any, any> }
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  | { readonly kind: 'activity'; readonly def: ActivityDefinition<any, any> };

/** The target of a schedule: exactly one definition, its kind and name. */
export function target(
  o: { workflow?: unknown; activity?: unknown },
  issues: Issue[],
  required: boolean,
): ScheduleTarget | undefined {
  if (o.workflow !== undefined && o.activity !== undefined) {
    issues.push({ path: 'workflow', message: 'give either workflow or activity, not both' });
    return undefined;
  }
  for (const kind of ['workflow', 'activity'] as const) {
    const def = o[kind];
    if (def === undefined) continue;
    const problem = definitionProblem(def, kind);
    if (problem) {
      issues.push({ path: problem.path ? `${kind}.${problem.path}` : kind, message: problem.message });
      return undefined;
    }
    return { kind, def } as ScheduleTarget;
  }
  if (required)
    issues.push({ path: 'workflow', message: 'give the workflow (or activity) each tick starts' });
  return undefined;
}

/** The run parameters of a target, with the schedule's queue and priority. */
export function runOptions(
  t: ScheduleTarget,
  o: { queue?: string | undefined; priority?: number | undefined },
): ScheduleRunOptions {
  const base = { queue: o.queue ?? t.def.queue, priority: o.priority ?? 0 };
  if (t.kind === 'workflow') return base;
  return { ...base, ...activityRunParamsOf(t.def) };
}

export function catchupPolicy(c: z.output<typeof catchupSchema> | undefined): CatchupPolicy {
  if (c === undefined || c === 'latest') return { kind: 'latest' };
  if (c === 'none') return { kind: 'none' };
  return { kind: 'all', windowMs: c.all.windowMs };
}

/**
 * The id argument of a call on one schedule, checked as `create` checks it: a value the database could not
 * store (NUL, a lone surrogate) or compare is refused here, naming `id`, not by the database.
 * @throws InvalidOptionsError naming `id`.
 */
export function scheduleId(id: unknown, call: string): string {
  const parsed = idSchema.safeParse(id);
  if (!parsed.success) {
    throw new InvalidOptionsError(
      `schedules.${call}`,
      parsed.error.issues.map((i) => ({ path: 'id', message: i.message })),
    );
  }
  return parsed.data;
}

/** A Date, ISO string or ms number as ms. */
function instantMs(value: Date | string | number): number {
  return value instanceof Date ? value.getTime() : typeof value === 'number' ? value : Date.parse(value);
}

/**
 * The range of a backfill, as ms. `to` against the database clock is checked by the caller, which reads it.
 * @throws InvalidOptionsError naming `from` or `to`: not a time, outside the years 0001–9999, `from` after `to`.
 */
export function backfillRange(range: unknown, where: string): { fromMs: number; toMs: number } {
  const r = parse(backfillSchema, range, where);
  const fromMs = instantMs(r.from);
  const toMs = instantMs(r.to);
  const issues: Issue[] = [];
  for (const [path, ms, value] of [
    ['from', fromMs, r.from],
    ['to', toMs, r.to],
  ] as const) {
    if (Number.isNaN(ms)) issues.push({ path, message: `${echoed(String(value))} is not a time` });
    else if (instantProblem(ms) !== undefined) issues.push({ path, message: instantProblem(ms) as string });
  }
  if (issues.length === 0 && fromMs > toMs) issues.push({ path: 'from', message: 'must not be after to' });
  if (issues.length > 0) throw new InvalidOptionsError(where, issues);
  return { fromMs, toMs };
}

/** A schedule's options resolved: what `create` and `upsert` store, but its next tick. */
export interface ResolvedSchedule {
  readonly spec: TickSpec;
  readonly row: Omit<NewScheduleRow, 'nextTickMs'>;
}

/**
 * The schedule `options` describe, checked: its tick spec and the row `create` and `upsert` insert.
 * @throws InvalidOptionsError naming each bad option; ValidationError naming the bad input field; PalisadeError
 * `PAYLOAD_TOO_LARGE`.
 */
export function resolveSchedule(options: ScheduleOptions): ResolvedSchedule {
  const where = `schedule options${typeof options?.id === 'string' ? ` of ${options.id}` : ''}`;
  const o = parse(createSchema, options, where);
  const issues: Issue[] = [];
  const spec = tickSpec(o, issues);
  const t = target(o, issues, true);
  if (issues.length > 0 || !spec || !t) throw new InvalidOptionsError(where, issues);
  const inputJson = checkScheduleInput(o.id, t, o.input);
  return {
    spec,
    row: {
      id: o.id,
      cron: spec.kind === 'cron' ? spec.cron : null,
      everyMs: spec.kind === 'every' ? spec.everyMs : null,
      timezone: spec.kind === 'cron' ? spec.timezone : 'UTC',
      targetKind: t.kind,
      targetName: t.def.name,
      inputJson,
      runOptions: runOptions(t, o),
      overlap: o.overlap ?? 'skip',
      catchup: catchupPolicy(o.catchup),
      paused: o.paused ?? false,
      pausedGiven: o.paused !== undefined,
    },
  };
}

/**
 * Check `input` against the target's schema and its JSON round trip.
 * @returns the input as stored JSON text.
 * @throws ValidationError naming the bad field; PalisadeError `PAYLOAD_TOO_LARGE`.
 */
export function checkScheduleInput(id: string, t: ScheduleTarget, input: unknown): string {
  const what = `input of schedule ${echoed(id)} (${t.kind} ${t.def.name})`;
  const value: unknown = validate(t.def.input as z.ZodType, input, what);
  return checkPayload(value, what, PAYLOAD_LIMITS.inputBytes);
}
