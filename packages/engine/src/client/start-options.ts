/**
 * The options of the client's starting calls (`start`, `startMany`, `enqueue`, `enqueueMany`,
 * `signalWithStart`) and of `list`, as types for callers and as the zod schemas that check them.
 * @module
 */
import { z } from 'zod';
import { RUN_STATUSES } from '../turn/state-machine.js';
import { type ConcurrencyLimit, type Duration, type RateLimit, type RetryPolicy } from '@palisade/sdk';
import {
  concurrencyLimitSchema,
  durationMs,
  instantSchema,
  rateLimitSchema,
  textProblem,
} from '@palisade/sdk/internal';
import type { CallerTransactionLike } from './caller-transaction-like.js';

/**
 * What a start or enqueue does when its idempotency key already started a run of the same workflow or activity
 * with a different input: `'fail'` throws `RUN_KEY_CONFLICT`; `'use-existing'` returns a handle to that run.
 * The same key with the same input always returns the existing run.
 */
export type OnKeyConflict = 'fail' | 'use-existing';

/** Options of {@link Client.enqueue}. */
export interface EnqueueOptions {
  /**
   * Idempotency key, scoped to this activity: enqueueing it again with the same input returns the existing run
   * (`handle.created` is false); with a different input see `onConflict`.
   */
  readonly key?: string;
  /** @defaultValue `'fail'` (RUN_KEY_CONFLICT) */
  readonly onConflict?: OnKeyConflict;
  /** @defaultValue the activity's queue */
  readonly queue?: string;
  /** Higher runs first. @defaultValue 0 */
  readonly priority?: number;
  /** Start no earlier than this long from now, by the database clock. Not with `startAt`. @defaultValue 0 */
  readonly delayMs?: Duration;
  /**
   * Start no earlier than this time, by the database clock (a time in the past: now). Not with `delayMs`.
   * @defaultValue now
   */
  readonly startAt?: Date;
  /** Overrides of the activity's retry policy, for this run. */
  readonly retry?: RetryPolicy;
  /** @defaultValue the activity's leaseMs */
  readonly leaseMs?: Duration;
  /** @defaultValue the activity's startToCloseTimeoutMs */
  readonly startToCloseTimeoutMs?: Duration;
  /**
   * At most `limit` runs of this activity with `key` running at once; the others wait, without holding back other
   * keys (see ConcurrencyLimit). @defaultValue none
   */
  readonly concurrency?: ConcurrencyLimit;
  /** Rate limit of this run's starts, replacing the activity's own (see RateLimit). @defaultValue the activity's */
  readonly rateLimit?: RateLimit;
  /**
   * Enqueue inside this open transaction of the caller's ({@link CallerTransactionLike}): the run is written by it
   * and exists only if it commits; workers are woken at its COMMIT. Not retried on a transient error (the
   * transaction is aborted: retry it whole). Use the handle after the commit.
   * @defaultValue none: the engine's own connection, retried on transient errors
   */
  readonly tx?: CallerTransactionLike;
}

/** Options of {@link Client.start}. */
export interface StartOptions {
  /**
   * Idempotency key, scoped to this workflow: starting it again with the same input returns the existing run
   * (`handle.created` is false); with a different input see `onConflict`.
   */
  readonly key?: string;
  /** @defaultValue `'fail'` (RUN_KEY_CONFLICT) */
  readonly onConflict?: OnKeyConflict;
  /** Queue its turns are claimed from. @defaultValue the workflow's queue */
  readonly queue?: string;
  /** Higher runs first; also the default priority of its steps. @defaultValue 0 */
  readonly priority?: number;
  /**
   * At most `limit` runs of this workflow with `key` running at once, from their first turn to their end (sleeps
   * and waits included); the others stay `pending`, without holding back other keys (see ConcurrencyLimit).
   * @defaultValue none
   */
  readonly concurrency?: ConcurrencyLimit;
  /**
   * Start no earlier than this time, by the database clock: the run is created `pending` with its first turn due
   * then (a time in the past: now). No worker is woken for it; one claims it once it is due, within its
   * `pollIntervalMs`. Not with `delayMs`. @defaultValue now
   */
  readonly startAt?: Date;
  /** Start no earlier than this long from now (ms, or `'10m'`), by the database clock, as `startAt`. @defaultValue 0 */
  readonly delayMs?: Duration;
  /**
   * Start inside this open transaction of the caller's ({@link CallerTransactionLike}): the run is written by it
   * and exists only if it commits; workers are woken at its COMMIT (never an eager start inside it). Not retried on
   * a transient error (the transaction is aborted: retry it whole). Use the handle (`result()`…) after the commit.
   * @defaultValue none: the engine's own connection, retried on transient errors
   */
  readonly tx?: CallerTransactionLike;
}

/**
 * Options of {@link Client.enqueueMany}: those of {@link Client.enqueue}, applying to every run of the call, with
 * one idempotency key per input (`keys`) instead of `key`.
 */
export interface EnqueueManyOptions extends Omit<EnqueueOptions, 'key'> {
  /**
   * Idempotency keys, scoped to this activity, one per input in the same order (`keys[k]` is the key of
   * `inputs[k]`; `undefined` for an input without one). A key behaves as `key` of {@link Client.enqueue} does,
   * within the batch too: a later input with a key an earlier input of the call also gave names the same run.
   * @defaultValue no keys
   */
  readonly keys?: readonly (string | undefined)[];
}

/**
 * Options of {@link Client.startMany}: those of {@link Client.start}, applying to every run of the call, with
 * one idempotency key per input (`keys`) instead of `key`.
 */
export interface StartManyOptions extends Omit<StartOptions, 'key'> {
  /**
   * Idempotency keys, scoped to this workflow, one per input in the same order (`keys[k]` is the key of
   * `inputs[k]`; `undefined` for an input without one). A key behaves as `key` of {@link Client.start} does,
   * within the batch too: a later input with a key an earlier input of the call also gave names the same run.
   * @defaultValue no keys
   */
  readonly keys?: readonly (string | undefined)[];
}

/**
 * How {@link Client.enqueueMany} and {@link Client.startMany} split a long array: one statement inserts at most
 * `runsPerStatement` runs, or fewer when their inputs' JSON exceeds `inputCharsPerStatement` characters (a
 * statement always takes at least one run). The call is atomic whatever its length: the statements of one call run
 * in one transaction (a savepoint of the caller's, with `tx`).
 */
export const BULK_START_LIMITS = Object.freeze({
  runsPerStatement: 1_000,
  inputCharsPerStatement: 8_000_000,
});

/** An idempotency key: 1–512 characters of storable text. */
export const keySchema = z
  .string()
  .min(1)
  .max(512)
  .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)');

/** The options every run takes: its key, queue and priority. */
export const runOptionsSchema = z
  .object({
    key: keySchema.optional(),
    queue: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1–128 letters, digits, _ . : -')
      .optional(),
    priority: z.number().int().min(-1000).max(1000).optional(),
    onConflict: z.enum(['fail', 'use-existing']).optional(),
    concurrency: concurrencyLimitSchema.optional(),
    // Checked by callerTransaction(), which says what kinds it takes.
    tx: z.unknown().optional(),
    startAt: instantSchema.optional(),
  })
  .strict();

/** The checks of {@link StartOptions} (`start`, `signalWithStart`). */
export const startSchema = runOptionsSchema.extend({ delayMs: durationMs.optional() }).strict();

/** The checks of {@link EnqueueOptions}. */
export const enqueueSchema = runOptionsSchema
  .extend({
    delayMs: durationMs.optional(),
    retry: z.any().optional(),
    leaseMs: durationMs.optional(),
    startToCloseTimeoutMs: durationMs.pipe(z.number().min(1)).optional(),
    rateLimit: rateLimitSchema.optional(),
  })
  .strict();

/** The `keys` of a bulk call: one optional key per input. */
export const keysSchema = z.array(keySchema.optional()).optional();
/** The checks of {@link StartManyOptions}. */
export const startManySchema = startSchema.omit({ key: true }).extend({ keys: keysSchema }).strict();
/** The checks of {@link EnqueueManyOptions}. */
export const enqueueManySchema = enqueueSchema.omit({ key: true }).extend({ keys: keysSchema }).strict();

/** The checks of `client.list`'s filter (`ListRunsFilter`): status, name (≤ 128 characters), limit 1–10,000. */
export const listSchema = z
  .object({
    status: z.enum(RUN_STATUSES).optional(),
    name: z
      .string()
      .max(128)
      .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)')
      .optional(),
    limit: z
      .number()
      .int('must be a whole number')
      .min(1, 'must be ≥ 1')
      .max(10_000, 'must be ≤ 10,000')
      .optional(),
  })
  .strict();
