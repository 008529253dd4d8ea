import type { ActivityDefinition, Duration, WorkflowDefinition } from '@palisade/sdk';
import type { RunDescription } from '../client/descriptions.js';
import type { ScheduleRow } from '../queries/schedule-rows.js';

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

/** Options of `Schedules.create`. Give `cron` or `everyMs`, and `workflow` or `activity`. */
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
  readonly everyMs?: Duration;
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
 * Changes of `Schedules.update`: any of the options but `id` and `paused` (use pause/resume). A new `cron`,
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

/** `Schedules.describe`: the schedule and its newest runs. */
export interface ScheduleDescription {
  readonly schedule: Schedule;
  /** The runs of its newest ticks (up to 20), newest tick first; each names `schedule_id` and `schedule_tick_at`. */
  readonly recentRuns: RunDescription[];
}

/** What `Schedules.backfill` did. */
export interface BackfillResult {
  /** The ticks in the range (by the schedule's spec). */
  readonly ticks: number;
  /** Runs it created: one per tick that had none. */
  readonly runIds: readonly string[];
  /** Ticks that already had a run (a tick fires once, whoever fires it). */
  readonly alreadyFired: number;
}

/** A stored schedule row as the public {@link Schedule}: the one place rows become what callers see. */
export function toSchedule(row: ScheduleRow): Schedule {
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
