import { z } from 'zod';
import { InvalidOptionsError, PalisadeError } from '@palisade/sdk';
import { echoed } from '@palisade/sdk/internal';
import type { Database } from '../db/database.js';
import { withInfraRetry } from '../infra-retry.js';
import { listScheduleRuns } from '../queries/read-run.js';
import { describeRun } from '../client/describe-run.js';
import {
  deleteSchedule,
  insertSchedule,
  listSchedules,
  readDatabaseNowMs,
  readSchedule,
  updateSchedule,
  type ScheduleChanges,
  type ScheduleRow,
} from '../queries/schedule-rows.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { assertUsableOutsideTransaction } from '../db/fenced-scope.js';
import {
  applyFirings,
  evaluateDueSchedules,
  tickSpecOf,
  type ScheduleEvaluation,
} from './evaluate-schedules.js';
import { patchChanges, upsertChanges } from './schedule-changes.js';
import {
  backfillRange,
  checkScheduleInput,
  parse,
  patchSchema,
  resolveSchedule,
  scheduleId,
  target,
  type Issue,
} from './schedule-options.js';
import { MAX_BACKFILL_TICKS, nextTickAfter, ticksBetween } from './schedule-ticks.js';
import {
  toSchedule,
  type BackfillResult,
  type Schedule,
  type ScheduleDescription,
  type ScheduleOptions,
  type SchedulePatch,
} from './schedule-types.js';

export type {
  BackfillResult,
  Schedule,
  ScheduleCatchup,
  ScheduleDescription,
  ScheduleOptions,
  ScheduleOverlap,
  SchedulePatch,
} from './schedule-types.js';
import { uuid7 } from '../turn/uuid7.js';

function notFound(id: string): PalisadeError {
  return new PalisadeError(
    'SCHEDULE_NOT_FOUND',
    `schedule ${echoed(id)} does not exist; check the id (schedules list shows existing schedules)`,
  );
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
   * `workflow`/`activity`, a cron expression croner refuses, an unknown time zone, `timezone` with `everyMs`, an
   * interval under 1 s, a bad overlap or catch-up policy, queue or priority.
   * @throws ValidationError naming the bad input field; PalisadeError `PAYLOAD_TOO_LARGE`.
   * @throws PalisadeError `SCHEDULE_EXISTS` when a schedule with this id exists with other options (or, when
   * `paused` is given, another paused state): change it with `upsert`, `update`, `pause` or `resume`. Without `paused`, an
   * existing schedule's paused state is left as an operator set it, and does not make the options differ.
   */
  async create(options: ScheduleOptions): Promise<Schedule> {
    this.assertOpen('create');
    const wanted = resolveSchedule(options);
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
    const wanted = resolveSchedule(options);
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
    const inputJson = t ? checkScheduleInput(id, t, o.input) : undefined;
    return this.change(id, (row, nowMs) => patchChanges(row, nowMs, { o, t, inputJson, where }));
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
      const runId = uuid7();
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
    const { fromMs, toMs } = backfillRange(range, where);
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
        ticks.map(() => uuid7()),
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
