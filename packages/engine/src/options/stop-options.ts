import { z } from 'zod';
import { InvalidOptionsError, type Duration } from '@palisade/sdk';
import { durationMs, formatIssues } from '@palisade/sdk/internal';

/** Options of `worker.stop()` and `engine.close()`. */
export interface StopOptions {
  /**
   * How long running attempts may finish before they are aborted with reason `shutdown`; a duration (ms or
   * `'10s'`), ≤ 2,147,483,647 ms. @defaultValue the worker's shutdownGraceMs
   */
  readonly graceMs?: Duration;
}

const stopSchema = z.object({ graceMs: durationMs.optional() }).strict();

/**
 * Validate {@link StopOptions}.
 * @returns the grace period in ms, or `undefined` for the worker's default.
 * @throws InvalidOptionsError naming the bad option.
 */
export function resolveStopOptions(options: StopOptions = {}): { readonly graceMs: number | undefined } {
  const parsed = stopSchema.safeParse(options);
  if (!parsed.success) throw new InvalidOptionsError('stop options', formatIssues(parsed.error.issues));
  return { graceMs: parsed.data.graceMs };
}
