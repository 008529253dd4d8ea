import { integer, jsonb, type PgSchema, uuid } from 'drizzle-orm/pg-core';

/**
 * One set of activity options that steps run under (issue 28, STORAGE.md §3.2, migration 0027): the resolved retry
 * policy, the lease and the start-to-close timeout, all in ms. Keyed by its content — `id` is
 * `<schema>.policy_id(retry_policy, lease_ms, start_to_close_timeout_ms)`, the first 128 bits of the SHA-256 of the
 * canonical jsonb text of the three — so a statement that inserts a step inserts its policy `ON CONFLICT DO
 * NOTHING` in the same statement, which writes nothing when the set exists. Rows are never updated or deleted: a
 * workload has a handful of option sets, and a step's `policy_id` names one for as long as the step exists.
 */
export function policiesTable(schema: PgSchema) {
  return schema.table('policies', {
    id: uuid('id').primaryKey(),
    /** The resolved retry policy (`ResolvedRetryPolicy`): `{}` for the steps that are not activities. */
    retryPolicy: jsonb('retry_policy').notNull(),
    leaseMs: integer('lease_ms').notNull(),
    startToCloseTimeoutMs: integer('start_to_close_timeout_ms').notNull(),
  });
}
