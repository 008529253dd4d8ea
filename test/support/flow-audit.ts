/**
 * Audits of flow control (issue 14) read off the engine's own tables, never off its counters: how many attempts
 * of one activity ran at once per concurrency key, and the claim times of a rate key's starts.
 */
import { sql } from 'drizzle-orm';
import type { Engine } from '@palisade/engine';

/**
 * The most attempts of activity `name` that held their step at once, per concurrency key, from the attempts
 * table: each attempt counts from its claim to its end (both by the database clock; an attempt not ended yet
 * counts to the end of time). At one instant an end is counted before a claim.
 */
export async function maxRunningPerKey(engine: Engine, name: string): Promise<Record<string, number>> {
  const rows = await engine.database.rows<{ key: string; max: number }>(sql`
    WITH iv AS (
      SELECT s.concurrency_key AS key, a.claimed_at AS t, 1 AS d
        FROM ${engine.names.attempts} a JOIN ${engine.names.steps} s ON s.id = a.step_id
       WHERE s.name = ${name} AND s.concurrency_key IS NOT NULL
      UNION ALL
      SELECT s.concurrency_key, coalesce(a.ended_at, 'infinity'::timestamptz), -1
        FROM ${engine.names.attempts} a JOIN ${engine.names.steps} s ON s.id = a.step_id
       WHERE s.name = ${name} AND s.concurrency_key IS NOT NULL),
    running AS (SELECT key, sum(d) OVER (PARTITION BY key ORDER BY t, d) AS n FROM iv)
    SELECT key, max(n)::int AS max FROM running GROUP BY key ORDER BY key`);
  return Object.fromEntries(rows.map((r) => [r.key, r.max]));
}

/** The steps of activity `name` running now, per concurrency key (a sample of the steps table). */
export async function runningNowPerKey(engine: Engine, name: string): Promise<Record<string, number>> {
  const rows = await engine.database.rows<{ key: string; n: number }>(sql`
    SELECT concurrency_key AS key, count(*)::int AS n FROM ${engine.names.steps}
     WHERE name = ${name} AND status = 'running' AND concurrency_key IS NOT NULL
     GROUP BY concurrency_key`);
  return Object.fromEntries(rows.map((r) => [r.key, r.n]));
}

/** Claim times (epoch ms, database clock) of every attempt of activity `name` (of one rate key), in order. */
export async function claimTimesMs(engine: Engine, name: string, rateKey?: string): Promise<number[]> {
  const rows = await engine.database.rows<{ ms: number }>(sql`
    SELECT (extract(epoch FROM a.claimed_at) * 1000)::float8 AS ms
      FROM ${engine.names.attempts} a JOIN ${engine.names.steps} s ON s.id = a.step_id
     WHERE s.name = ${name} AND (${rateKey ?? null}::text IS NULL OR s.rate_key = ${rateKey ?? null}::text)
     ORDER BY a.claimed_at`);
  return rows.map((r) => r.ms);
}

/** The most of `times` (ms) inside any window of `periodMs` (half-open: a start exactly `periodMs` later is outside). */
export function maxInWindow(times: readonly number[], periodMs: number): number {
  let most = 0;
  for (let i = 0, j = 0; j < times.length; j++) {
    while ((times[j] as number) - (times[i] as number) >= periodMs) i++;
    most = Math.max(most, j - i + 1);
  }
  return most;
}
