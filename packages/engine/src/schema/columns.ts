import { sql } from 'drizzle-orm';
import { type AnyPgColumn, check, type PgSchema, timestamp, uuid } from 'drizzle-orm/pg-core';
import { sqlList } from '../turn/state-machine.js';

/** A `timestamptz` column read as a `Date`: every `*_at` column of the engine. */
export const ts = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/**
 * A uuid primary key `id` that the database fills, when a statement does not, with `<schema>.uuid7()` (migration
 * 0022): time-ordered, so a new key lands in the rightmost leaf of the primary key (STORAGE.md §3.9). Written
 * `"palisade"."uuid7"()` in the generated migration, which `migrate.ts` rewrites for the configured schema.
 */
export const uuid7Id = (schema: PgSchema) =>
  uuid('id')
    .primaryKey()
    .default(sql.raw(`"${schema.schemaName.replace(/"/g, '""')}"."uuid7"()`));

/**
 * A CHECK constraint `name` that `column` holds one of `values` (a state machine's statuses or kinds, from
 * `turn/state-machine.ts`); NULL passes, as in any CHECK.
 */
export function oneOf(name: string, column: AnyPgColumn, values: readonly string[]) {
  return check(name, sql`${column} IN ${sql.raw(sqlList(values))}`);
}
