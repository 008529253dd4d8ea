import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  PalisadeError,
  checkPayload,
  durationMs,
  echoed,
  formatIssues,
  instantProblem,
  textProblem,
  validate,
  type ActivityDefinition,
  type Duration,
  type WorkflowDefinition,
  definitionProblem,
} from '@palisade/sdk';
import type { Database } from '../db/database.js';
import { withInfraRetry } from '../infra-retry.js';
import { listScheduleRuns } from '../queries/read-run.js';
import type { RunDescription } from '../client/descriptions.js';
import { describeRun } from '../client/describe-run.js';
import {
  deleteSchedule,
  insertSchedule,
  listSchedules,
  readDatabaseNowMs,
  readSchedule,
  updateSchedule,
  type NewScheduleRow,
  type ScheduleChanges,
  type ScheduleRow,
  type ScheduleRunOptions,
} from '../queries/schedule-rows.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { assertUsableOutsideTransaction } from '../worker/fenced-scope.js';
import {
  activityRunParamsOf,
  applyFirings,
  evaluateDueSchedules,
  tickSpecOf,
  type ScheduleEvaluation,
} from './evaluate-schedules.js';
import {
  MAX_BACKFILL_TICKS,
  cronOf,
  isKnownTimezone,
  nextTickAfter,
  ticksBetween,
  type CatchupPolicy,
  type TickSpec,
} from './schedule-ticks.js';

/**
 * What a tick does while the schedule's previous run (the run its latest fired tick started) is still pending or
 * running:
 * - `skip`: nothing; the tick is counted in `skippedTicks`.
 * - `buffer-one`: the tick waits and starts once the previous run has ended (within a poll interval of a
 *   worker); at most one tick waits, later ones are skipped.
 * - `allow-all`: a run starts anyway.
 * - `cancel-previous`: the previous run is cancelled (as `handle.cancel()`) and a run starts, in one transaction.
 */
export type ScheduleOverlap = 'skip' | 'buffer-one' | 'allow-all' | 'cancel-previous';

/**
 * What happens to ticks that fell due while no worker evaluated schedules (see `CatchupPolicy` in the docs of
 * `schedule-ticks.ts`): `'none'` skips them (a tick fires only when it is the one due tick and at most 60 s late);
 * `'latest'` fires the most recent one only; `{ all: { windowMs } }` fires each one at most `windowMs` old, at
 * most 100 per evaluation, oldest first. None of them walks every missed tick of a long downtime.
 */
export type ScheduleCatchup = 'none' | 'latest' | { readonly all: { readonly windowMs: Duration } };

/** Options of {@link Schedules.create}. Give `cron` or `every`, and `workflow` or `activity`. */
export interface ScheduleOptions {
  /** The schedule's id, chosen by the caller: 1–200 characters of storable text. */
  readonly id: string;
  /**
   * A cron expression, read by croner: five fields (minute … weekday), or six with seconds first, or a nickname
   * (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`); names and `L`, `#`, `W` as croner reads them. Not a
   * date (croner reads one as a single run): for one run at a time, use `client.start` with `startAt`. Ticks are computed in `timezone`, DST included (a local time that does
   * not exist that day fires at the first time after it; one that occurs twice fires once).
   */
  readonly cron?: string;
  /** A fixed interval instead of `cron`: ticks at whole multiples of it since 1970-01-01T00:00Z. ≥ 1 s. */
  readonly every?: Duration;
  /** IANA time zone of `cron` (`'Europe/Berlin'`). Only with `cron`. @defaultValue `'UTC'` */
  readonly timezone?: string;
  /** The workflow each tick starts. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly workflow?: WorkflowDefinition<any, any>;
  /**
   * The activity each tick enqueues as a standalone run, with the activity's retry policy, lease, timeout and
   * rate limit as `client.enqueue` gives them: those of the definition a worker that serves the activity holds
   * when it fires the tick (else those of the latest create, upsert or update).
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  readonly activity?: ActivityDefinition<any, any>;
  /** The input of every run, checked against the workflow's or activity's schema here. */
  readonly input?: unknown;
  /** @defaultValue `'skip'` */
  readonly overlap?: ScheduleOverlap;
  /** @defaultValue `'latest'` */
  readonly catchup?: ScheduleCatchup;
  /** @defaultValue the workflow's or activity's queue */
  readonly queue?: string;
  /** Priority of the runs; −1000 to 1000, higher first. @defaultValue 0 */
  readonly priority?: number;
  /** Create it paused (no tick fires until `resume`). @defaultValue false */
  readonly paused?: boolean;
}

/**
 * Changes of {@link Schedules.update}: any of the options but `id` and `paused` (use pause/resume). A new `cron`,
 * `every` or `timezone` sets the next tick from now by the database clock. A new `input` needs `workflow` or
 * `activity` beside it, to check it against; a new target needs its input.
 */
export type SchedulePatch = Partial<Omit<ScheduleOptions, 'id' | 'paused'>>;

/** A schedule as `get`, `list` and the changing calls return it. Times are by the database clock. */
export interface Schedule {
  readonly id: string;
  /** `{ cron, timezone }` or `{ everyMs }`. */
  readonly spec: { readonly cron: string; readonly timezone: string } | { readonly everyMs: number };
  readonly target: { readonly kind: 'workflow' | 'activity'; readonly name: string };
  readonly input: unknown;
  readonly overlap: ScheduleOverlap;
  readonly catchup: 'none' | 'latest' | { readonly all: { readonly windowMs: number } };
  readonly queue: string;
  readonly priority: number;
  readonly paused: boolean;
  /** The next tick not yet fired (while paused: the one it would be; resume sets it again from now). */
  readonly nextTickAt: Date;
  /** The latest tick that started a run, and that run. */
  readonly lastTickAt: Date | null;
  readonly lastRunId: string | null;
  /** overlap `buffer-one`: the tick waiting for the last run to end. */
  readonly bufferedTickAt: Date | null;
  /** Ticks the overlap policy let start no run. */
  readonly skippedTicks: number;
  /** Bumped by every change and every evaluation that moved the schedule. */
  readonly version: number;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** {@link Schedules.describe}: the schedule and its newest runs. */
export interface ScheduleDescription {
  readonly schedule: Schedule;
  /** The runs of its newest ticks (up to 20), newest tick first; each names `scheduleId` and `scheduleTickAt`. */
  readonly recentRuns: RunDescription[];
}

/** What {@link Schedules.backfill} did. */
export interface BackfillResult {
  /** The ticks in the range (by the schedule's spec). */
  readonly ticks: number;
  /** Runs it created: one per tick that had none. */
  readonly runIds: readonly string[];
  /** Ticks that already had a run (a tick fires once, whoever fires it). */
  readonly alreadyFired: number;
}

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
  every: durationMs.pipe(z.number().min(1_000, 'must be ≥ 1 s')).optional(),
  timezone: z.string().min(1).max(100).optional(),
  workflow: z.any().optional(),
  activity: z.any().optional(),
  input: z.unknown().optional(),
  overlap: z.enum(['skip', 'buffer-one', 'allow-all', 'cancel-previous']).optional(),
  catchup: catchupSchema.optional(),
  queue: z.string().regex(NAME, 'must be 1–128 letters, digits, _ . : -').optional(),
  priority: z.number().int('must be a whole number').min(-1000).max(1000).optional(),
};
const createSchema = z.object({ id: idSchema, paused: z.boolean().optional(), ...patchShape }).strict();
const patchSchema = z.object(patchShape).strict();
const backfillSchema = z
  .object({
    from: z.union([z.date(), z.string(), z.number()]),
    to: z.union([z.date(), z.string(), z.number()]),
  })
  .strict();

type Issue = { path: string; message: string };

/** Parse with `schema`. @throws InvalidOptionsError naming each bad option, `where` naming the call. */
function parse<S extends z.ZodType>(schema: S, value: unknown, where: string): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new InvalidOptionsError(where, formatIssues(parsed.error.issues));
  return parsed.data;
}

/** The tick spec from `cron`/`every`/`timezone`, with an issue for each problem. */
function tickSpec(
  o: { cron?: string | undefined; every?: number | undefined; timezone?: string | undefined },
  issues: Issue[],
): TickSpec | undefined {
  if (o.cron !== undefined && o.every !== undefined) {
    issues.push({ path: 'cron', message: 'give either cron or every, not both' });
    return undefined;
  }
  if (o.cron === undefined && o.every === undefined) {
    issues.push({ path: 'cron', message: 'give cron (a cron expression) or every (an interval)' });
    return undefined;
  }
  if (o.every !== undefined) {
    if (o.timezone !== undefined) {
      issues.push({ path: 'timezone', message: 'applies only to cron schedules (every ticks in UTC ms)' });
    }
    return { kind: 'every', everyMs: o.every };
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

/** The target of a schedule: exactly one definition, its kind and name. */
function target(
  o: { workflow?: unknown; activity?: unknown },
  issues: Issue[],
  required: boolean,
):
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  | { kind: 'workflow'; def: WorkflowDefinition<any, any> }
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  | { kind: 'activity'; def: ActivityDefinition<any, any> }
  | undefined {
  if (o.workflow !== undefined && o.activity !== undefined) {
    issues.push({ path: 'workflow', message: 'give either workflow or activity, not both' });
    return undefined;
  }
  if (o.workflow !== undefined) {
    const problem = definitionProblem(o.workflow, 'workflow');
    if (problem) {
      issues.push({ path: problem.path ? `workflow.${problem.path}` : 'workflow', message: problem.message });
      return undefined;
    }
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return { kind: 'workflow', def: o.workflow as WorkflowDefinition<any, any> };
  }
  if (o.activity !== undefined) {
    const problem = definitionProblem(o.activity, 'activity');
    if (problem) {
      issues.push({ path: problem.path ? `activity.${problem.path}` : 'activity', message: problem.message });
      return undefined;
    }
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    return { kind: 'activity', def: o.activity as ActivityDefinition<any, any> };
  }
  if (required)
    issues.push({ path: 'workflow', message: 'give the workflow (or activity) each tick starts' });
  return undefined;
}

/** The run parameters of a target, with the schedule's queue and priority. */
function runOptions(
  t: NonNullable<ReturnType<typeof target>>,
  o: { queue?: string | undefined; priority?: number | undefined },
): ScheduleRunOptions {
  const base = { queue: o.queue ?? t.def.queue, priority: o.priority ?? 0 };
  if (t.kind === 'workflow') return base;
  return { ...base, ...activityRunParamsOf(t.def) };
}

function catchupPolicy(c: z.output<typeof catchupSchema> | undefined): CatchupPolicy {
  if (c === undefined || c === 'latest') return { kind: 'latest' };
  if (c === 'none') return { kind: 'none' };
  return { kind: 'all', windowMs: c.all.windowMs };
}

function toSchedule(row: ScheduleRow): Schedule {
  const date = (ms: number | null) => (ms === null ? null : new Date(Number(ms)));
  const c = row.catchup;
  return {
    id: row.id,
    spec: row.cron !== null ? { cron: row.cron, timezone: row.timezone } : { everyMs: Number(row.every_ms) },
    target: { kind: row.target_kind, name: row.target_name },
    input: row.input,
    overlap: row.overlap,
    catchup: c.kind === 'all' ? { all: { windowMs: c.windowMs } } : c.kind,
    queue: row.run_options.queue,
    priority: row.run_options.priority,
    paused: row.paused,
    nextTickAt: new Date(Number(row.next_tick_ms)),
    lastTickAt: date(row.last_tick_ms),
    lastRunId: row.last_run_id,
    bufferedTickAt: date(row.buffered_tick_ms),
    skippedTicks: Number(row.skipped_ticks),
    version: Number(row.version),
    createdAt: new Date(Number(row.created_ms)),
    updatedAt: new Date(Number(row.updated_ms)),
  };
}

/**
 * The id argument of a call on one schedule, checked as `create` checks it: a value the database could not
 * store (NUL, a lone surrogate) or compare is refused here, naming `id`, not by the database.
 * @throws InvalidOptionsError naming `id`.
 */
function scheduleId(id: unknown, call: string): string {
  const parsed = idSchema.safeParse(id);
  if (!parsed.success) {
    throw new InvalidOptionsError(
      `schedules.${call}`,
      parsed.error.issues.map((i) => ({ path: 'id', message: i.message })),
    );
  }
  return parsed.data;
}

function notFound(id: string): PalisadeError {
  return new PalisadeError(
    'SCHEDULE_NOT_FOUND',
    `schedule ${echoed(id)} does not exist; check the id (schedules list shows existing schedules)`,
  );
}

/** A Date, ISO string or ms number as ms. */
function instantMs(value: Date | string | number): number {
  return value instanceof Date ? value.getTime() : typeof value === 'number' ? value : Date.parse(value);
}

/** A schedule's options resolved: what `create` and `upsert` store, but its next tick. */
interface ResolvedSchedule {
  readonly spec: TickSpec;
  readonly row: Omit<NewScheduleRow, 'nextTickMs'>;
}

/** Whether two JSON values are the same value (key order aside), as jsonb compares them. */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a).filter((k) => (a as Record<string, unknown>)[k] !== undefined);
  const kb = Object.keys(b).filter((k) => (b as Record<string, unknown>)[k] !== undefined);
  return (
    ka.length === kb.length &&
    ka.every((k) => sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
  );
}

/**
 * What {@link Schedules.upsert} changes of `row` to make it `wanted` at database time `nowMs`, or undefined when
 * nothing differs. The fired ticks (last tick and run, skipped ticks) are never changed; the next tick only by a
 * new spec or a resume, the paused state only when `paused` was given.
 */
function upsertChanges(
  row: ScheduleRow,
  wanted: ResolvedSchedule,
  nowMs: number,
): ScheduleChanges | undefined {
  const w = wanted.row;
  const c: { -readonly [K in keyof ScheduleChanges]: ScheduleChanges[K] } = {};
  const respec =
    row.cron !== w.cron ||
    (row.every_ms === null ? null : Number(row.every_ms)) !== w.everyMs ||
    row.timezone !== w.timezone;
  if (respec) {
    c.cron = w.cron;
    c.everyMs = w.everyMs;
    c.timezone = w.timezone;
    c.nextTickMs = nextTickAfter(wanted.spec, nowMs);
    c.clearBuffered = true;
  }
  if (row.target_kind !== w.targetKind) c.targetKind = w.targetKind;
  if (row.target_name !== w.targetName) c.targetName = w.targetName;
  if (!sameJson(row.input, JSON.parse(w.inputJson))) c.inputJson = w.inputJson;
  if (!sameJson(row.run_options, w.runOptions)) c.runOptions = w.runOptions;
  if (row.overlap !== w.overlap) c.overlap = w.overlap;
  if (!sameJson(row.catchup, w.catchup)) c.catchup = w.catchup;
  if (w.pausedGiven && row.paused !== w.paused) {
    c.paused = w.paused;
    if (w.paused) c.clearBuffered = true;
    else if (!respec) c.nextTickMs = nextTickAfter(wanted.spec, nowMs); // a resume: no backlog of the pause
  }
  return Object.keys(c).length === 0 ? undefined : c;
}

/** How often a change that lost its compare-and-set to an evaluation is tried again. */
const CAS_TRIES = 20;

/**
 * Durable schedules: cron expressions or intervals that start workflow runs (or standalone activity runs), fired
 * by the workers of any engine on the same schema (`WorkerOptions.schedules`, on by default) — no leader, no
 * lease: each tick starts exactly one run however many workers evaluate, stall, die or disagree on the time, and
 * due times are judged by the database clock only. Obtain it as `engine.schedules`. Every call that names a
 * schedule throws InvalidOptionsError naming `id` for an id that is not 1–200 characters of storable text (no
 * NUL, no lone surrogate), before it reaches the database.
 */
export class Schedules {
  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    /** Whether the engine was closed (its calls then throw `ENGINE_CLOSED`). */
    private readonly isClosed: () => boolean = () => false,
  ) {}

  /**
   * Create a schedule. Its first tick is the first after now by the database clock (nothing fires for the past:
   * see `backfill`). The input is checked against the target's schema now, as `client.start` does. Idempotent:
   * when a schedule with this id exists with these options (a call retried after a lost reply), it is returned as
   * it is. The target activity's own retry policy, lease, timeout and rate limit are not options of the schedule:
   * a changed definition is no conflict, and the schedule takes its parameters (a worker that serves the activity
   * fires its runs with its own definition anyway). To declare schedules at every start of an application, use
   * {@link Schedules.upsert}, which also takes changed options.
   * @returns the schedule as stored.
   * @throws InvalidOptionsError naming the bad option: neither or both of `cron`/`every` or of
   * `workflow`/`activity`, a cron expression croner refuses, an unknown time zone, `timezone` with `every`, an
   * interval under 1 s, a bad overlap or catch-up policy, queue or priority.
   * @throws ValidationError naming the bad input field; PalisadeError `PAYLOAD_TOO_LARGE`.
   * @throws PalisadeError `SCHEDULE_EXISTS` when a schedule with this id exists with other options (or, when
   * `paused` is given, another paused state): change it with `upsert`, `update`, `pause` or `resume`. Without `paused`, an
   * existing schedule's paused state is left as an operator set it, and does not make the options differ.
   */
  async create(options: ScheduleOptions): Promise<Schedule> {
    this.assertOpen('create');
    const wanted = this.resolve(options);
    const nowMs = await withInfraRetry(() => readDatabaseNowMs(this.db, this.names));
    const inserted = await withInfraRetry(() =>
      insertSchedule(this.db, this.names, { ...wanted.row, nextTickMs: nextTickAfter(wanted.spec, nowMs) }),
    );
    if (inserted === 'different') {
      throw new PalisadeError(
        'SCHEDULE_EXISTS',
        `schedule ${echoed(wanted.row.id)} already exists with other options${wanted.row.pausedGiven ? ' or paused state' : ''}; ` +
          'use upsert to bring it to these options, or update it (or pause or resume it), or delete it first, or ' +
          'choose another id',
      );
    }
    return this.get(wanted.row.id);
  }

  /**
   * Create a schedule, or bring the one with this id to these options: what an application that declares its
   * schedules at every start wants (as pg-boss's `schedule(name, cron)`). In one transaction: a new id is created
   * as `create` does; an existing schedule gets the options that differ, and keeps what they do not name — the
   * ticks it already fired (its last tick and run, its skipped ticks), and, unless `paused` is given, the paused
   * state an operator set. A new `cron`, `every` or `timezone` sets the next tick from now by the database clock
   * (as `update`); `paused: false` on a paused schedule resumes it (as `resume`). Options equal to the stored ones
   * change nothing (the version stays).
   * @returns the schedule as stored.
   * @throws InvalidOptionsError, ValidationError, PalisadeError `PAYLOAD_TOO_LARGE`, as `create`.
   */
  async upsert(options: ScheduleOptions): Promise<Schedule> {
    this.assertOpen('upsert');
    const wanted = this.resolve(options);
    const { id } = wanted.row;
    return withInfraRetry(() =>
      this.db.transaction(async (tx) => {
        for (let i = 0; i < CAS_TRIES; i++) {
          const nowMs = await readDatabaseNowMs(tx, this.names);
          const nextTickMs = nextTickAfter(wanted.spec, nowMs);
          const inserted = await insertSchedule(tx, this.names, { ...wanted.row, nextTickMs });
          const { row } = await readSchedule(tx, this.names, id);
          if (!row) continue; // deleted between the insert's conflict and this read: create it again
          if (inserted === 'inserted') return toSchedule(row);
          const changes = upsertChanges(row, wanted, nowMs);
          if (!changes) return toSchedule(row);
          // Compare-and-set: an evaluation that moved the row meanwhile makes this read it again.
          const written = await updateSchedule(tx, this.names, { id, version: Number(row.version), changes });
          if (written) return toSchedule(written);
        }
        throw new PalisadeError('DATABASE_ERROR', `schedule ${id}: upsert kept losing to concurrent changes`);
      }),
    );
  }

  /** The schedule `options` describe, checked: its tick spec and the row `create` and `upsert` insert. */
  private resolve(options: ScheduleOptions): ResolvedSchedule {
    const where = `schedule options${typeof options?.id === 'string' ? ` of ${options.id}` : ''}`;
    const o = parse(createSchema, options, where);
    const issues: Issue[] = [];
    const spec = tickSpec(o, issues);
    const t = target(o, issues, true);
    if (issues.length > 0 || !spec || !t) throw new InvalidOptionsError(where, issues);
    const inputJson = this.checkInput(o.id, t, o.input);
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
   * Change a schedule (see {@link SchedulePatch}). An evaluation that read the old version fires nothing on it.
   * @returns the schedule as changed.
   * @throws InvalidOptionsError naming the bad option (as `create`, and `input` without its definition);
   * ValidationError naming the bad input field; PalisadeError `SCHEDULE_NOT_FOUND`.
   */
  async update(given: string, patch: SchedulePatch): Promise<Schedule> {
    this.assertOpen('update');
    const id = scheduleId(given, 'update');
    const where = `schedule update of ${echoed(String(id))}`;
    const o = parse(patchSchema, patch, where);
    const issues: Issue[] = [];
    const t = target(o, issues, false);
    if (o.input !== undefined && !t && issues.length === 0) {
      issues.push({
        path: 'input',
        message: 'give the workflow (or activity) beside it, to check the input against its schema',
      });
    }
    if (issues.length > 0) throw new InvalidOptionsError(where, issues);
    const inputJson = t ? this.checkInput(id, t, o.input) : undefined;
    return this.change(id, (row, nowMs) => {
      const respec = o.cron !== undefined || o.every !== undefined || o.timezone !== undefined;
      const changes: { -readonly [K in keyof ScheduleChanges]: ScheduleChanges[K] } = {};
      if (respec) {
        const specIssues: Issue[] = [];
        const current = tickSpecOf(row);
        const spec = tickSpec(
          o.cron !== undefined || o.every !== undefined
            ? o
            : current.kind === 'cron'
              ? { cron: current.cron, timezone: o.timezone }
              : { every: current.everyMs, timezone: o.timezone },
          specIssues,
        );
        if (!spec) throw new InvalidOptionsError(where, specIssues);
        changes.cron = spec.kind === 'cron' ? spec.cron : null;
        changes.everyMs = spec.kind === 'every' ? spec.everyMs : null;
        changes.timezone = spec.kind === 'cron' ? spec.timezone : 'UTC';
        changes.nextTickMs = nextTickAfter(spec, nowMs);
        changes.clearBuffered = true;
      }
      if (t) {
        changes.targetKind = t.kind;
        changes.targetName = t.def.name;
        changes.inputJson = inputJson;
        changes.runOptions = runOptions(t, {
          // A new target takes its own queue, unless given one; the same target keeps the schedule's.
          queue: o.queue ?? (row.target_name === t.def.name ? row.run_options.queue : undefined),
          priority: o.priority ?? row.run_options.priority,
        });
      } else if (o.queue !== undefined || o.priority !== undefined) {
        changes.runOptions = {
          ...row.run_options,
          queue: o.queue ?? row.run_options.queue,
          priority: o.priority ?? row.run_options.priority,
        };
      }
      if (o.overlap !== undefined) changes.overlap = o.overlap;
      if (o.catchup !== undefined) changes.catchup = catchupPolicy(o.catchup);
      return changes;
    });
  }

  /**
   * Pause a schedule: no tick fires until {@link Schedules.resume}; a buffered tick is dropped. Pausing a paused
   * schedule changes nothing.
   * @throws PalisadeError `SCHEDULE_NOT_FOUND`.
   */
  async pause(id: string): Promise<Schedule> {
    this.assertOpen('pause');
    return this.change(scheduleId(id, 'pause'), (row) =>
      row.paused ? undefined : { paused: true, clearBuffered: true },
    );
  }

  /**
   * Resume a paused schedule with no backlog: its next tick is the first after now by the database clock, however
   * long it was paused (ticks of the pause never fire; `backfill` can start them). Resuming a schedule that is not
   * paused changes nothing.
   * @throws PalisadeError `SCHEDULE_NOT_FOUND`.
   */
  async resume(id: string): Promise<Schedule> {
    this.assertOpen('resume');
    return this.change(scheduleId(id, 'resume'), (row, nowMs) =>
      row.paused ? { paused: false, nextTickMs: nextTickAfter(tickSpecOf(row), nowMs) } : undefined,
    );
  }

  /**
   * Start a run of the schedule now (its tick is the database time of the call), paused or not, whatever its
   * overlap policy; its regular ticks go on as before.
   * @returns the id of the run it started.
   * @throws PalisadeError `SCHEDULE_NOT_FOUND`.
   */
  async trigger(given: string): Promise<string> {
    this.assertOpen('trigger');
    const id = scheduleId(given, 'trigger');
    for (let i = 0; i < CAS_TRIES; i++) {
      const { row, nowMs } = await withInfraRetry(() => readSchedule(this.db, this.names, id));
      if (!row) throw notFound(id);
      const runId = randomUUID();
      const fired = await this.fire(row, [nowMs], [runId]);
      if (fired.runs.length === 1) return runId;
    }
    throw new PalisadeError(
      'DATABASE_ERROR',
      `schedule ${echoed(id)}: trigger kept losing to concurrent changes`,
    );
  }

  /**
   * Start the runs of the schedule's ticks from `from` to `to` (both included; Dates, ISO strings or ms), oldest
   * first, each tick that has no run yet — whatever the overlap policy, paused or not. At most 1,000 ticks; `to`
   * must not be later than now by the database clock.
   * @throws InvalidOptionsError naming `from` or `to` (not a time, outside the years 0001–9999, `from` after `to`,
   * `to` in the future, more than 1,000 ticks); PalisadeError `SCHEDULE_NOT_FOUND`.
   */
  async backfill(
    given: string,
    range: { readonly from: Date | string | number; readonly to: Date | string | number },
  ): Promise<BackfillResult> {
    this.assertOpen('backfill');
    const id = scheduleId(given, 'backfill');
    const where = `backfill of schedule ${echoed(String(id))}`;
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
    for (let i = 0; i < CAS_TRIES; i++) {
      const { row, nowMs } = await withInfraRetry(() => readSchedule(this.db, this.names, id));
      if (!row) throw notFound(id);
      if (toMs > nowMs) {
        throw new InvalidOptionsError(where, [
          {
            path: 'to',
            message: `${new Date(toMs).toISOString()} is later than now by the database clock (${new Date(nowMs).toISOString()})`,
          },
        ]);
      }
      const ticks = ticksBetween(tickSpecOf(row), fromMs, toMs, MAX_BACKFILL_TICKS);
      if (!ticks) {
        throw new InvalidOptionsError(where, [
          {
            path: 'to',
            message: `the range holds more than ${MAX_BACKFILL_TICKS} ticks; backfill it in parts`,
          },
        ]);
      }
      if (ticks.length === 0) return { ticks: 0, runIds: [], alreadyFired: 0 };
      const fired = await this.fire(
        row,
        ticks,
        ticks.map(() => randomUUID()),
      );
      if (fired.applied.length === 1) {
        const runIds = fired.runs.map((x) => x.runId);
        return { ticks: ticks.length, runIds, alreadyFired: ticks.length - runIds.length };
      }
    }
    throw new PalisadeError(
      'DATABASE_ERROR',
      `schedule ${echoed(id)}: backfill kept losing to concurrent changes`,
    );
  }

  /**
   * Delete a schedule; no tick fires after this returns. Its runs are kept, and their `run:started` events still
   * name it and their tick, but they no longer belong to it: a schedule created again under this id starts afresh.
   * @throws PalisadeError `SCHEDULE_NOT_FOUND`.
   */
  async delete(given: string): Promise<void> {
    this.assertOpen('delete');
    const id = scheduleId(given, 'delete');
    if (!(await withInfraRetry(() => deleteSchedule(this.db, this.names, id)))) throw notFound(id);
  }

  /**
   * Schedules in id order, at most `limit`.
   * @throws InvalidOptionsError naming a bad `limit` (1 to 10,000; default 1,000).
   */
  async list(options: { readonly limit?: number } = {}): Promise<Schedule[]> {
    this.assertOpen('list');
    const o = parse(
      z.object({ limit: z.number().int('must be a whole number').min(1).max(10_000).optional() }).strict(),
      options,
      'schedules list options',
    );
    const rows = await withInfraRetry(() => listSchedules(this.db, this.names, { limit: o.limit ?? 1_000 }));
    return rows.map(toSchedule);
  }

  /** One schedule. @throws PalisadeError `SCHEDULE_NOT_FOUND`. */
  async get(given: string): Promise<Schedule> {
    this.assertOpen('get');
    const id = scheduleId(given, 'get');
    const { row } = await withInfraRetry(() => readSchedule(this.db, this.names, id));
    if (!row) throw notFound(id);
    return toSchedule(row);
  }

  /** One schedule and the runs of its newest ticks. @throws PalisadeError `SCHEDULE_NOT_FOUND`. */
  async describe(given: string): Promise<ScheduleDescription> {
    this.assertOpen('describe');
    const id = scheduleId(given, 'describe');
    const schedule = await this.get(id);
    const recentRuns = await withInfraRetry(() =>
      listScheduleRuns(this.db, this.names, { scheduleId: id, limit: 20 }),
    );
    return { schedule, recentRuns: recentRuns.map(describeRun) };
  }

  /**
   * Evaluate the due schedules of this schema once, now, as every worker does on its schedule timer (tests, or a
   * process that runs no worker). Safe beside evaluating workers.
   */
  async evaluate(): Promise<ScheduleEvaluation> {
    this.assertOpen('evaluate');
    return evaluateDueSchedules(this.db, this.names);
  }

  /**
   * @throws PalisadeError `ENGINE_CLOSED` after `engine.close()`; FENCED_TRANSACTION_NESTED inside a fenced
   * transaction.
   */
  private assertOpen(call: string): void {
    if (this.isClosed()) {
      throw new PalisadeError('ENGINE_CLOSED', `engine is closed; schedules.${call} needs an open engine`);
    }
    assertUsableOutsideTransaction(this.db, `schedules.${call}`);
  }

  /** Check `input` against the target's schema and its JSON round trip. */
  private checkInput(id: string, t: NonNullable<ReturnType<typeof target>>, input: unknown): string {
    const what = `input of schedule ${echoed(id)} (${t.kind} ${t.def.name})`;
    const value: unknown = validate(t.def.input as z.ZodType, input, what);
    return checkPayload(value, what, PAYLOAD_LIMITS.inputBytes);
  }

  /** Fire `ticks` of `row` by hand (manual: every tick starts a run; the next tick stays). */
  private fire(row: ScheduleRow, ticks: readonly number[], runIds: readonly string[]) {
    return applyFirings(
      this.db,
      this.names,
      [
        {
          id: row.id,
          version: Number(row.version),
          ticks: ticks.map((tickMs, k) => ({ tickMs, runId: runIds[k] as string })),
          manual: true,
        },
      ],
      false,
    );
  }

  /**
   * Apply `changes(row, nowMs)` to schedule `id` by compare-and-set on its version, reading it again when an
   * evaluation moved it meanwhile; `undefined` changes nothing.
   */
  private async change(
    id: string,
    changes: (row: ScheduleRow, nowMs: number) => ScheduleChanges | undefined,
  ): Promise<Schedule> {
    for (let i = 0; i < CAS_TRIES; i++) {
      const { row, nowMs } = await withInfraRetry(() => readSchedule(this.db, this.names, id));
      if (!row) throw notFound(id);
      const c = changes(row, nowMs);
      if (!c) return toSchedule(row);
      const written = await withInfraRetry(() =>
        updateSchedule(this.db, this.names, { id, version: Number(row.version), changes: c }),
      );
      if (written) return toSchedule(written);
    }
    throw new PalisadeError(
      'DATABASE_ERROR',
      `schedule ${echoed(id)}: change kept losing to concurrent changes`,
    );
  }
}
