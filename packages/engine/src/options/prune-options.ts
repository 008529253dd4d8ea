import { z } from 'zod';
import { type Duration } from '@palisade/sdk';
import { durationSchema, parseOptions } from '@palisade/sdk/internal';
import { MAX_RETENTION_MS } from './engine-options.js';

/** Options of `engine.pruneRuns(...)` and `palisade runs prune`. */
export interface PruneOptions {
  /**
   * Delete the runs that ended longer ago than this, by the database clock: a duration (ms, or `'30d'`-style),
   * from 0 to 100 years. Required.
   */
  readonly olderThanMs: Duration;
  /** Count what would be deleted, delete nothing. @defaultValue false */
  readonly dryRun?: boolean;
}

/** {@link PruneOptions} checked, the age in ms. */
export interface ResolvedPruneOptions {
  readonly olderThanMs: number;
  readonly dryRun: boolean;
}

const pruneSchema = z
  .object({
    olderThanMs: durationSchema(MAX_RETENTION_MS),
    dryRun: z.boolean().optional(),
  })
  .strict();

/**
 * Validate {@link PruneOptions}.
 * @throws InvalidOptionsError naming the bad option: a missing `olderThanMs`, one that is not a duration (`'30x'`)
 * or is longer than 100 years, a `dryRun` that is not a boolean.
 */
export function resolvePruneOptions(options: PruneOptions): ResolvedPruneOptions {
  const o = parseOptions(pruneSchema, options, 'prune options');
  return Object.freeze({ olderThanMs: o.olderThanMs, dryRun: o.dryRun ?? false });
}
