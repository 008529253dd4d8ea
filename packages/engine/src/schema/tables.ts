import { bigint, boolean, index, pgSchema, type PgSchema, text, timestamp, uuid } from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';
import { ts } from './columns.js';
import { attemptRecordsTable, eventsTable, signalsTable } from './history-tables.js';
import { policiesTable } from './policies-table.js';
import { readyRingTable, readyTable } from './ready-table.js';
import { runsTable } from './runs-table.js';
import { schedulesTable } from './schedules-table.js';
import { stepsTable } from './steps-table.js';
import { turnQueueTable } from './turn-queue-table.js';

/** Name of the Postgres schema the migrations are generated for; replaced by the configured name when applied. */
export const DEFAULT_SCHEMA = 'palisade';

/** For the fenced-resource helper: the highest token accepted per scope. */
export function fencesTable(schema: PgSchema) {
  return schema.table('fences', {
    scope: text('scope').primaryKey(),
    token: bigint('token', { mode: 'bigint' }).notNull(),
    updatedAt: ts('updated_at').notNull(),
  });
}

/**
 * One row per flow-control key (`step/<activity>/<key>`, `run/<workflow>/<key>` for concurrency,
 * `rate/<activity>/<key>` for rate limits), inserted with the first step or run that names it. A claim that
 * admits work under a key locks its row and bumps `version` in the same statement, so a claim whose snapshot
 * predates another's admission sees a newer version than its snapshot shows and admits nothing under that key
 * (see claim-steps.ts). `recent`: the claim times (DB clock) of a rate key's starts still inside its window.
 */
export function flowKeysTable(schema: PgSchema) {
  return schema.table('flow_keys', {
    key: text('key').primaryKey(),
    version: bigint('version', { mode: 'bigint' })
      .notNull()
      .default(sql`0`),
    recent: timestamp('recent', { withTimezone: true, mode: 'date' })
      .array()
      .notNull()
      .default(sql`'{}'`),
  });
}

/**
 * The `handle.result()` and `handle.watch()` calls waiting on a run now, one row each, deleted when the call
 * returns (issue 26). A statement that ends a run sends its `run:` NOTIFY item only when the run has a row here,
 * and a turn commit that goes on its `watch:` item only when one has `turns` (see `<schema>.run_watched`). Apart
 * from the runs, so that a reader never writes the hot run row and a watcher that left costs no NOTIFY. A row
 * whose caller died without deleting it lapses at `expires_at`, which a live caller pushes forward, and the
 * retention sweep deletes it.
 */
export function runWatchersTable(schema: PgSchema) {
  return schema.table(
    'run_watchers',
    {
      id: uuid('id').primaryKey(),
      runId: uuid('run_id').notNull(),
      /** A `watch()` (every turn NOTIFYs), not only a `result()` (the end does). */
      turns: boolean('turns').notNull(),
      expiresAt: ts('expires_at').notNull(),
    },
    (t) => [
      index('run_watchers_run_id_idx').on(t.runId, t.turns),
      index('run_watchers_expires_at_idx').on(t.expiresAt),
    ],
  );
}

/** Test-only offset of `<schema>.now()` (time travel); one row at most, absent in production. */
export function clockOffsetTable(schema: PgSchema) {
  return schema.table('clock_offset', {
    id: boolean('id').primaryKey().default(true),
    offsetMs: bigint('offset_ms', { mode: 'number' }).notNull(),
  });
}

/**
 * The engine's tables in Postgres schema `schemaName` (DESIGN.md §3). Column units are in their names
 * (`*_ms` integers, `*_at` timestamptz); every lease and due-time comparison reads `<schema>.now()`. The status
 * and kind columns are CHECKed against the state machines of `turn/state-machine.ts`.
 */
export function defineTables(schemaName: string) {
  const schema = pgSchema(schemaName);
  /** One global sequence for every fencing token: strictly increasing, never reused. */
  const fencingTokenSeq = schema.sequence('fencing_token_seq', { startWith: 1, increment: 1 });
  const runs = runsTable(schema);
  return {
    schema,
    fencingTokenSeq,
    runs,
    steps: stepsTable(schema),
    policies: policiesTable(schema),
    ready: readyTable(schema),
    readyRing: readyRingTable(schema),
    turnQueue: turnQueueTable(schema),
    attemptRecords: attemptRecordsTable(schema),
    events: eventsTable(schema),
    fences: fencesTable(schema),
    signals: signalsTable(schema),
    flowKeys: flowKeysTable(schema),
    schedules: schedulesTable(schema),
    runWatchers: runWatchersTable(schema),
    clockOffset: clockOffsetTable(schema),
  };
}

/** The engine's tables, typed; one instance per configured schema name. */
export type Tables = ReturnType<typeof defineTables>;
