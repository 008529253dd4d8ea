import { sql, type SQL } from 'drizzle-orm';
import type { SchemaNames } from './schema-names.js';

/*
 * A standalone job's run row is written once after its insert, by the statement that ends it (issue 12: fewer
 * writes per job), and its input and output are stored once, on the run:
 * - the claim does not mark the run `running`: a `pending` job whose step has had an attempt (`attempt > 0`; a
 *   retry of the run resets it to 0) reads as `running`, started when its step first started;
 * - the job's step stores no input (the claim reads the run's, {@link stepInputSql}) and, once completed, no
 *   output (read off the run, {@link stepOutputSql}).
 * Rows stored before this (step input and output set as well) read the same.
 */

/**
 * The columns `status`, `started_at` and `start_at` of run alias `r`, a standalone job's read off its step: `running`
 * and the step's first start while its step has had an attempt and the run has not ended; the time a delayed start
 * becomes due while it is ahead.
 */
export function jobRunColumns(n: SchemaNames, r: SQL): { status: SQL; startedAt: SQL; startAt: SQL } {
  const step = (column: string) =>
    sql`(SELECT js.${sql.raw(column)} FROM ${n.steps} js WHERE js.run_id = ${r}.id AND js.retired_at IS NULL
          ORDER BY js.seq LIMIT 1)`;
  return {
    status: sql`CASE WHEN ${r}.kind = 'activity' AND ${r}.status = 'pending' AND ${step('attempt')} > 0
                     THEN 'running' ELSE ${r}.status END`,
    startedAt: sql`CASE WHEN ${r}.kind = 'activity' THEN coalesce(${r}.started_at, ${step('started_at')})
                        ELSE ${r}.started_at END`,
    // A delayed start not yet due: a workflow's first turn, or a job's step before its first attempt.
    startAt: sql`(SELECT d.t FROM (SELECT CASE WHEN ${r}.kind = 'workflow' THEN ${r}.turn_next_run_at
                                               WHEN ${step('attempt')} = 0 THEN ${step('next_run_at')} END AS t) d
                   WHERE ${r}.status = 'pending' AND d.t > ${n.now})`,
  };
}

/** The input of step alias `s` as its attempt receives it: a job's step stores none, its run holds it. */
export function stepInputSql(n: SchemaNames, s: SQL): SQL {
  return sql`coalesce(${s}.input, (SELECT ji.input FROM ${n.runs} ji WHERE ji.id = ${s}.run_id AND ji.kind = 'activity'))`;
}

/** The output of step alias `s` as reads show it: a job's completed step stores none, its run holds it. */
export function stepOutputSql(n: SchemaNames, s: SQL): SQL {
  return sql`CASE WHEN ${s}.output IS NULL AND ${s}.status = 'completed'
                  THEN (SELECT jo.output FROM ${n.runs} jo WHERE jo.id = ${s}.run_id AND jo.kind = 'activity')
                  ELSE ${s}.output END`;
}
