/**
 * 1b. What per-key concurrency costs the claim (issue 14): the no-op activity run of scenario 1 at concurrency 50,
 * once without keys and once with every job under one of 100 concurrency keys of limit 10 (1,000 places, more
 * than the worker's 50 slots, so the limits cost work but hold nothing back), in that order, each on a fresh
 * schema. `ratio`: keyed jobs/s over plain jobs/s, from the same process and server one after the other.
 */
import { round } from '../stats.js';
import { activityThroughput, type ActivityThroughputResult } from './activities.js';
import type { ScenarioContext } from './context.js';

export interface ConcurrencyKeysResult {
  readonly plain: ActivityThroughputResult;
  readonly keyed: ActivityThroughputResult;
  /** Keyed jobs/s ÷ plain jobs/s (drain phase). */
  readonly ratio: number;
}

const CONCURRENCY = 50;
const KEYED = { keys: 100, limit: 10 } as const;

export async function concurrencyKeys(ctx: ScenarioContext): Promise<ConcurrencyKeysResult> {
  const plain = await activityThroughput(ctx, CONCURRENCY);
  const keyed = await activityThroughput(ctx, CONCURRENCY, KEYED);
  return { plain, keyed, ratio: round(keyed.drain.perSecond / plain.drain.perSecond, 2) };
}
