import { z } from 'zod';
import { echoed } from './errors.js';
import { parseOptions } from './validate.js';

/**
 * A message a workflow run can receive from outside once it has started (Temporal's signal): a name and a zod
 * schema for its payload. Send it with `client.signal(runId, signal, payload)` or `handle.signal(signal,
 * payload)`; receive it in workflow code with `ctx.waitForSignal(signal)`.
 */
export interface SignalDefinition<P extends z.ZodType = z.ZodType> {
  readonly kind: 'signal';
  readonly name: string;
  readonly payload: P;
}

/** Options of {@link defineSignal}. */
export interface SignalOptions<P extends z.ZodType> {
  /** 1–128 letters, digits and `_ . : -`; a run's signals are matched to its waits by name. */
  readonly name: string;
  /** The payload's schema, checked when the signal is sent (`signal()` throws ValidationError). */
  readonly payload: P;
}

/** What `ctx.waitForSignal(signal, { timeout })` resolves with: the payload, or that the timeout passed first. */
export type SignalWait<P> = { readonly timedOut: false; readonly payload: P } | { readonly timedOut: true };

const NAME = /^[A-Za-z0-9_.:-]{1,128}$/;

const signalOptionsSchema = z
  .object({
    name: z.string().regex(NAME, 'must be 1–128 characters of letters, digits, and _ . : -'),
    payload: z.instanceof(z.ZodType, { message: 'must be a zod schema' }),
  })
  .strict();

/**
 * Define a signal: a name and a zod schema for its payload. Legal anywhere (usually at module level, shared by
 * the sender and the workflow).
 * @throws InvalidOptionsError naming each bad option.
 */
export function defineSignal<P extends z.ZodType>(options: SignalOptions<P>): SignalDefinition<P> {
  parseOptions(
    signalOptionsSchema,
    options,
    `signal ${echoed((options as { name?: unknown } | undefined)?.name)}`,
  );
  return Object.freeze({ kind: 'signal' as const, name: options.name, payload: options.payload });
}
