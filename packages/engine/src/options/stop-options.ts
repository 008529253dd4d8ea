import { z } from 'zod';
import { type Duration } from '@palisade/sdk';
import { durationMs, parseOptions } from '@palisade/sdk/internal';

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
  return { graceMs: parseOptions(stopSchema, options, 'stop options').graceMs };
}
