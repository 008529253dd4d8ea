// Entry point for drizzle-kit only: migrations are generated for schema "palisade" and the migrator
// substitutes the configured schema name when it applies them.
import { DEFAULT_SCHEMA, defineTables } from './tables.js';

const tables = defineTables(DEFAULT_SCHEMA);
export const {
  schema,
  fencingTokenSeq,
  runs,
  steps,
  turnQueue,
  attemptRecords,
  events,
  fences,
  signals,
  flowKeys,
  schedules,
  runWatchers,
  clockOffset,
} = tables;
