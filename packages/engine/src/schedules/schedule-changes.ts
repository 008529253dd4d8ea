import type { z } from 'zod';
import { InvalidOptionsError } from '@palisade/sdk';
import type { ScheduleChanges, ScheduleRow } from '../queries/schedule-rows.js';
import { tickSpecOf } from './evaluate-schedules.js';
import { nextTickAfter } from './schedule-ticks.js';
import {
  catchupPolicy,
  runOptions,
  tickSpec,
  type Issue,
  type ResolvedSchedule,
  type ScheduleTarget,
  type patchSchema,
} from './schedule-options.js';

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
 * What `Schedules.upsert` changes of `row` to make it `wanted` at database time `nowMs`, or undefined when
 * nothing differs. The fired ticks (last tick and run, skipped ticks) are never changed; the next tick only by a
 * new spec or a resume, the paused state only when `paused` was given.
 */
export function upsertChanges(
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

/** A {@link SchedulePatch} checked: its options, its target (if it names one) and that target's input as JSON. */
export interface CheckedPatch {
  readonly o: z.output<typeof patchSchema>;
  readonly t: ScheduleTarget | undefined;
  readonly inputJson: string | undefined;
  /** Names the call in an InvalidOptionsError. */
  readonly where: string;
}

/**
 * What `Schedules.update` changes of `row` at database time `nowMs`. A new `cron`, `every` or `timezone`
 * (over the row's own spec for what it does not give) sets the next tick from now and drops a buffered tick; a new
 * target takes its own queue unless given one; the same target keeps the schedule's.
 * @throws InvalidOptionsError naming the spec's problem.
 */
export function patchChanges(row: ScheduleRow, nowMs: number, patch: CheckedPatch): ScheduleChanges {
  const { o, t, inputJson, where } = patch;
  const respec = o.cron !== undefined || o.everyMs !== undefined || o.timezone !== undefined;
  const changes: { -readonly [K in keyof ScheduleChanges]: ScheduleChanges[K] } = {};
  if (respec) {
    const specIssues: Issue[] = [];
    const current = tickSpecOf(row);
    const spec = tickSpec(
      o.cron !== undefined || o.everyMs !== undefined
        ? o
        : current.kind === 'cron'
          ? { cron: current.cron, timezone: o.timezone }
          : { everyMs: current.everyMs, timezone: o.timezone },
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
}
