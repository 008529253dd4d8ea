import { describe, expect, it } from 'vitest';
import { InvalidOptionsError, type SerializedFailure } from './errors.js';
import {
  RETRY_DEFAULTS,
  mergeRetryPolicy,
  resolveRetryPolicy,
  retryDecision,
  type ResolvedRetryPolicy,
  type RetryPolicy,
} from './retry-policy.js';

/** Run `fn`, expect an InvalidOptionsError, and return it for closer inspection. */
function invalidOptions(fn: () => unknown): InvalidOptionsError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidOptionsError);
    return error as InvalidOptionsError;
  }
  throw new Error('expected an InvalidOptionsError, but nothing was thrown');
}

describe('resolveRetryPolicy', () => {
  it('fills every default when no policy is given', () => {
    expect(resolveRetryPolicy(undefined)).toEqual({
      initialIntervalMs: 1_000,
      backoffCoefficient: 2,
      maximumIntervalMs: 100_000,
      maximumAttempts: 10,
      nonRetryableErrorTypes: [],
      jitter: 0.2,
    });
  });

  it('takes its defaults from RETRY_DEFAULTS', () => {
    const resolved = resolveRetryPolicy({});
    expect(resolved.initialIntervalMs).toBe(RETRY_DEFAULTS.initialIntervalMs);
    expect(resolved.backoffCoefficient).toBe(RETRY_DEFAULTS.backoffCoefficient);
    expect(resolved.maximumAttempts).toBe(RETRY_DEFAULTS.maximumAttempts);
    expect(resolved.jitter).toBe(RETRY_DEFAULTS.jitter);
  });

  it('defaults maximumIntervalMs to 100 × initialIntervalMs', () => {
    expect(resolveRetryPolicy({ initialIntervalMs: 250 }).maximumIntervalMs).toBe(25_000);
  });

  it('keeps every field the caller set', () => {
    expect(
      resolveRetryPolicy({
        initialIntervalMs: 500,
        backoffCoefficient: 1.5,
        maximumIntervalMs: 4_000,
        maximumAttempts: 3,
        nonRetryableErrorTypes: ['CardDeclined'],
        jitter: 0,
      }),
    ).toEqual({
      initialIntervalMs: 500,
      backoffCoefficient: 1.5,
      maximumIntervalMs: 4_000,
      maximumAttempts: 3,
      nonRetryableErrorTypes: ['CardDeclined'],
      jitter: 0,
    });
  });

  it('converts string durations to milliseconds', () => {
    const resolved = resolveRetryPolicy({ initialIntervalMs: '1.5s', maximumIntervalMs: '2m' });
    expect(resolved.initialIntervalMs).toBe(1_500);
    expect(resolved.maximumIntervalMs).toBe(120_000);
  });

  it('returns a frozen policy whose error-type list is a frozen copy', () => {
    const types = ['A'];
    const resolved = resolveRetryPolicy({ nonRetryableErrorTypes: types });
    types.push('B');
    expect(resolved.nonRetryableErrorTypes).toEqual(['A']);
    expect(Object.isFrozen(resolved)).toBe(true);
    expect(Object.isFrozen(resolved.nonRetryableErrorTypes)).toBe(true);
  });

  it('accepts maximumIntervalMs equal to initialIntervalMs', () => {
    expect(resolveRetryPolicy({ initialIntervalMs: '5s', maximumIntervalMs: 5_000 }).maximumIntervalMs).toBe(
      5_000,
    );
  });

  it('refuses maximumIntervalMs below initialIntervalMs with a message naming both', () => {
    const error = invalidOptions(() =>
      resolveRetryPolicy({ initialIntervalMs: '10s', maximumIntervalMs: '5s' }, 'activity charge retry'),
    );
    expect(error.code).toBe('INVALID_OPTIONS');
    expect(error.issues).toEqual([
      { path: 'maximumIntervalMs', message: 'must be ≥ initialIntervalMs (10000 ms), got 5000 ms' },
    ]);
    expect(error.message).toBe(
      '[INVALID_OPTIONS] invalid activity charge retry: maximumIntervalMs: must be ≥ initialIntervalMs ' +
        '(10000 ms), got 5000 ms',
    );
  });

  it('refuses maximumIntervalMs below the default initialIntervalMs', () => {
    const error = invalidOptions(() => resolveRetryPolicy({ maximumIntervalMs: 10 }));
    expect(error.message).toContain('maximumIntervalMs: must be ≥ initialIntervalMs (1000 ms), got 10 ms');
  });

  it('refuses an unknown key and names it', () => {
    const error = invalidOptions(() => resolveRetryPolicy({ maxAttempts: 3 } as RetryPolicy));
    expect(error.message).toMatch(/^\[INVALID_OPTIONS\] invalid retry policy: .*"maxAttempts"/);
    expect(error.issues).toHaveLength(1);
  });

  it('refuses maximumAttempts 0', () => {
    const error = invalidOptions(() => resolveRetryPolicy({ maximumAttempts: 0 }));
    expect(error.issues).toEqual([{ path: 'maximumAttempts', message: 'must be ≥ 1' }]);
  });

  it('refuses a fractional maximumAttempts', () => {
    const error = invalidOptions(() => resolveRetryPolicy({ maximumAttempts: 2.5 }));
    expect(error.issues).toEqual([{ path: 'maximumAttempts', message: 'must be a whole number' }]);
  });

  it('refuses a backoffCoefficient below 1 and a jitter outside [0, 1]', () => {
    expect(invalidOptions(() => resolveRetryPolicy({ backoffCoefficient: 0.5 })).issues).toEqual([
      { path: 'backoffCoefficient', message: 'must be ≥ 1' },
    ]);
    expect(invalidOptions(() => resolveRetryPolicy({ jitter: 1.5 })).issues).toEqual([
      { path: 'jitter', message: 'must be ≤ 1' },
    ]);
    expect(invalidOptions(() => resolveRetryPolicy({ jitter: -0.1 })).issues).toEqual([
      { path: 'jitter', message: 'must be ≥ 0' },
    ]);
  });

  it('refuses a malformed duration string, naming the field', () => {
    const error = invalidOptions(() => resolveRetryPolicy({ initialIntervalMs: '5 minutes' }));
    expect(error.issues).toHaveLength(1);
    expect(error.issues[0]?.path).toBe('initialIntervalMs');
    expect(error.issues[0]?.message).toContain('"5 minutes" is not a duration');
  });

  it('refuses a negative or NaN interval, naming the field', () => {
    expect(invalidOptions(() => resolveRetryPolicy({ initialIntervalMs: -1 })).message).toContain(
      'initialIntervalMs: -1 is not a duration',
    );
    expect(invalidOptions(() => resolveRetryPolicy({ maximumIntervalMs: Number.NaN })).message).toContain(
      'maximumIntervalMs: NaN is not a duration',
    );
  });

  it('reports every bad field at once', () => {
    const error = invalidOptions(() => resolveRetryPolicy({ maximumAttempts: 0, jitter: 2 }));
    expect(error.issues.map((i) => i.path)).toEqual(['maximumAttempts', 'jitter']);
  });
});

describe('mergeRetryPolicy', () => {
  const base = resolveRetryPolicy({ maximumAttempts: 5, initialIntervalMs: 200 });

  it('returns the base policy itself when there is no override', () => {
    expect(mergeRetryPolicy(base, undefined)).toBe(base);
  });

  it('lets fields of the override win and keeps the others from the base', () => {
    const merged = mergeRetryPolicy(base, { maximumAttempts: 2, maximumIntervalMs: '1s' });
    expect(merged).toEqual({ ...base, maximumAttempts: 2, maximumIntervalMs: 1_000 });
  });

  it('validates the merged policy', () => {
    const error = invalidOptions(() => mergeRetryPolicy(base, { maximumAttempts: 0 }, 'call of charge'));
    expect(error.message).toBe('[INVALID_OPTIONS] invalid call of charge: maximumAttempts: must be ≥ 1');
  });
});

describe('retryDecision', () => {
  const policy: ResolvedRetryPolicy = resolveRetryPolicy({
    maximumAttempts: 3,
    nonRetryableErrorTypes: ['CardDeclined'],
  });
  const failure = (over: Partial<SerializedFailure> = {}): SerializedFailure => ({
    type: 'Error',
    message: 'boom',
    nonRetryable: false,
    ...over,
  });

  it('retries a retryable failure while attempts are left', () => {
    expect(retryDecision(policy, failure(), 1)).toEqual({ retry: true });
    expect(retryDecision(policy, failure(), 2)).toEqual({ retry: true });
  });

  it('stops when the failed attempt was the last one allowed', () => {
    expect(retryDecision(policy, failure(), 3)).toEqual({ retry: false, reason: 'attempts-exhausted' });
  });

  it('stops when the attempt is past maximumAttempts', () => {
    expect(retryDecision(policy, failure(), 4)).toEqual({ retry: false, reason: 'attempts-exhausted' });
  });

  it('never retries when maximumAttempts is 1', () => {
    expect(retryDecision(resolveRetryPolicy({ maximumAttempts: 1 }), failure(), 1)).toEqual({
      retry: false,
      reason: 'attempts-exhausted',
    });
  });

  it('does not retry a failure flagged non-retryable, even on the first attempt', () => {
    expect(retryDecision(policy, failure({ nonRetryable: true }), 1)).toEqual({
      retry: false,
      reason: 'non-retryable',
    });
  });

  it('does not retry a failure whose type is listed in nonRetryableErrorTypes', () => {
    expect(retryDecision(policy, failure({ type: 'CardDeclined' }), 1)).toEqual({
      retry: false,
      reason: 'non-retryable',
    });
  });

  it('matches nonRetryableErrorTypes exactly, not by prefix or case', () => {
    expect(retryDecision(policy, failure({ type: 'carddeclined' }), 1)).toEqual({ retry: true });
    expect(retryDecision(policy, failure({ type: 'CardDeclinedTwice' }), 1)).toEqual({ retry: true });
  });

  it('reports a non-retryable failure as non-retryable even when attempts are also exhausted', () => {
    expect(retryDecision(policy, failure({ nonRetryable: true }), 3)).toEqual({
      retry: false,
      reason: 'non-retryable',
    });
  });
});

describe('mergeRetryPolicy with a new initial interval only', () => {
  it('derives the maximum from the new initial interval instead of refusing it', () => {
    const base = resolveRetryPolicy({});
    const merged = mergeRetryPolicy(base, { initialIntervalMs: '5m' });
    expect(merged.initialIntervalMs).toBe(300_000);
    expect(merged.maximumIntervalMs).toBe(30_000_000);
  });
});

describe('retry policies whose largest delay the database cannot compute', () => {
  it.each([
    [{ initialIntervalMs: '30d' }, 'initialIntervalMs', 'too long'],
    [{ maximumIntervalMs: 1e12 }, 'maximumIntervalMs', 'too long'],
    [{ backoffCoefficient: 1e308 }, 'backoffCoefficient', 'overflows'],
    [{ backoffCoefficient: Number.POSITIVE_INFINITY }, 'backoffCoefficient', ''],
  ])('refuses %j at definition time, naming the field', (policy, path, message) => {
    let caught: unknown;
    try {
      resolveRetryPolicy(policy, 'activity charge retry');
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(InvalidOptionsError);
    const issue = (caught as InvalidOptionsError).issues.find((i) => i.path === path);
    expect(issue?.message).toContain(message);
  });

  it('accepts many attempts with a coefficient whose power would overflow: the delay stops at the maximum', () => {
    const policy = resolveRetryPolicy({
      initialIntervalMs: 1_000,
      backoffCoefficient: 2,
      maximumAttempts: 1_000_000,
    });
    expect(policy.maximumIntervalMs).toBe(100_000);
  });

  it('caps the default maximum interval at the longest duration', () => {
    expect(resolveRetryPolicy({ initialIntervalMs: '20d' }).maximumIntervalMs).toBe(2_147_483_647);
  });
});
