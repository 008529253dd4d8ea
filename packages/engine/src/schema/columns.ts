import { sql } from 'drizzle-orm';
import { type AnyPgColumn, check, timestamp } from 'drizzle-orm/pg-core';
import { sqlList } from '../turn/state-machine.js';

/** A `timestamptz` column read as a `Date`: every `*_at` column of the engine. */
export const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/**
 * A CHECK constraint `name` that `column` holds one of `values` (a state machine's statuses or kinds, from
 * `turn/state-machine.ts`); NULL passes, as in any CHECK.
 */
export function oneOf(name: string, column: AnyPgColumn, values: readonly string[]) {
  return check(name, sql`${column} IN ${sql.raw(sqlList(values))}`);
}
