import { sql } from 'drizzle-orm';
import type { AttemptRow, Engine } from '../index.js';

/**
 * The attempts of a run's workflow turns (attempt rows with no step), oldest first; a plain read through the
 * engine's database handle. `RunHandle.describe()` groups attempts under steps, so turn attempts are not in
 * it; `runs show` needs them to list every attempt of a workflow run.
 */
export async function readTurnAttempts(engine: Engine, runId: string): Promise<AttemptRow[]> {
  const ts = (column: string) =>
    sql.raw(`to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`);
  return engine.database.rows<AttemptRow>(sql`
    SELECT step_id::text, kind, attempt, epoch, fencing_token::text AS token, worker_id,
           ${ts('claimed_at')} AS claimed_at, ${ts('ended_at')} AS ended_at, outcome,
           (extract(epoch FROM (ended_at - claimed_at)) * 1000)::float8 AS duration_ms
      FROM ${engine.names.attempts}
     WHERE run_id = ${runId}::uuid AND step_id IS NULL
     ORDER BY fencing_token`);
}
