import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ActivityFailure,
  ECHOED_CHARS,
  ApplicationFailure,
  AttemptAbortedError,
  InvalidOptionsError,
  LeaseLostError,
  NonDeterminismError,
  PalisadeError,
  ValidationError,
  echoed,
  formatIssues,
  serializeFailure,
  type LeaseLostDetails,
} from './errors.js';

describe('PalisadeError', () => {
  it('starts its message with the code in brackets and keeps the context fields', () => {
    const cause = new Error('socket closed');
    const error = new PalisadeError('RUN_NOT_FOUND', 'run r1 does not exist', {
      runId: 'r1',
      stepId: 's1',
      attempt: 2,
      token: 41n,
      cause,
    });
    expect(error.message).toBe('[RUN_NOT_FOUND] run r1 does not exist');
    expect(error.code).toBe('RUN_NOT_FOUND');
    expect(error).toMatchObject({ runId: 'r1', stepId: 's1', attempt: 2, token: 41n });
    expect(error.cause).toBe(cause);
    expect(error).toBeInstanceOf(Error);
  });

  it('leaves context fields undefined and sets no cause when none are given', () => {
    const error = new PalisadeError('ENGINE_CLOSED', 'closed');
    expect([error.runId, error.stepId, error.attempt, error.token]).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    expect('cause' in error).toBe(false);
  });

  it('names each subclass after its own class', () => {
    expect(new InvalidOptionsError('worker', []).name).toBe('InvalidOptionsError');
    expect(new ApplicationFailure('x').name).toBe('ApplicationFailure');
  });
});

describe('LeaseLostError', () => {
  const details: LeaseLostDetails = {
    operation: 'heartbeat',
    stepLabel: 'charge#3',
    runId: 'run-1',
    stepId: 'step-9',
    attempt: 1,
    staleToken: 41n,
    currentToken: 57n,
    reason: 'superseded',
  };

  it('starts with [LEASE_LOST] and names the step, attempt, stale token and current token', () => {
    const error = new LeaseLostError(details);
    expect(error.message).toMatch(
      /^\[LEASE_LOST\] heartbeat rejected: step charge#3 attempt 1 \(token 41\) was superseded by token 57\./,
    );
    expect(error.code).toBe('LEASE_LOST');
  });

  it('tells the reader what to do', () => {
    expect(new LeaseLostError(details).message).toContain('stop its work and discard its results');
  });

  it('keeps the details as fields, with token set to the stale token', () => {
    const error = new LeaseLostError(details);
    expect(error).toMatchObject({
      operation: 'heartbeat',
      stepLabel: 'charge#3',
      staleToken: 41n,
      currentToken: 57n,
      reason: 'superseded',
      runId: 'run-1',
      stepId: 'step-9',
      attempt: 1,
      token: 41n,
    });
    expect(error).toBeInstanceOf(PalisadeError);
  });

  it('gives the reason instead of a newer token when the step has no current owner', () => {
    const error = new LeaseLostError({
      ...details,
      operation: 'complete',
      currentToken: null,
      reason: 'expired',
    });
    expect(error.message).toMatch(
      /^\[LEASE_LOST\] complete rejected: step charge#3 attempt 1 \(token 41\) lost its lease \(expired\)\./,
    );
    expect(error.message).not.toContain('superseded by');
  });

  it('gives the reason when the current token is still the stale one (expired, not yet reclaimed)', () => {
    const error = new LeaseLostError({ ...details, currentToken: 41n, reason: 'expired' });
    expect(error.message).toContain('(token 41) lost its lease (expired)');
  });

  it('shows a question mark when the attempt number is unknown', () => {
    const { attempt: _attempt, ...withoutAttempt } = details;
    expect(new LeaseLostError(withoutAttempt).message).toContain('step charge#3 attempt ? (token 41)');
  });

  it('keeps the cause', () => {
    const cause = new Error('0 rows');
    expect(new LeaseLostError(details, { cause }).cause).toBe(cause);
  });
});

describe('AttemptAbortedError', () => {
  it('starts with [ATTEMPT_ABORTED] followed by the reason', () => {
    const error = new AttemptAbortedError('deadline', 'start-to-close timeout passed', { attempt: 2 });
    expect(error.message).toBe('[ATTEMPT_ABORTED] deadline: start-to-close timeout passed');
    expect(error.reason).toBe('deadline');
    expect(error.attempt).toBe(2);
  });
});

describe('InvalidOptionsError', () => {
  it('names where the options were, each bad path and its problem', () => {
    const error = new InvalidOptionsError('worker', [
      { path: 'heartbeatIntervalMs', message: 'must be ≤ leaseMs / 3' },
      { path: '', message: 'Unrecognized key: "x"' },
    ]);
    expect(error.message).toBe(
      '[INVALID_OPTIONS] invalid worker: heartbeatIntervalMs: must be ≤ leaseMs / 3; Unrecognized key: "x"',
    );
    expect(error.issues).toHaveLength(2);
  });
});

describe('ValidationError', () => {
  it('names the boundary and each field path, with (root) for the value itself', () => {
    const error = new ValidationError('input of activity charge', [
      { path: 'amountCents', message: 'Too small' },
      { path: '', message: 'Invalid input' },
    ]);
    expect(error.message).toBe(
      '[VALIDATION_FAILED] input of activity charge is invalid: amountCents: Too small; (root): Invalid input',
    );
  });
});

describe('formatIssues', () => {
  it('joins issue paths with dots, numbers and symbols included', () => {
    expect(
      formatIssues([
        { path: ['items', 3, 'amount'], message: 'bad' },
        { path: [], message: 'root' },
        { path: [Symbol('s')], message: 'sym' },
      ]),
    ).toEqual([
      { path: 'items.3.amount', message: 'bad' },
      { path: '', message: 'root' },
      { path: 'Symbol(s)', message: 'sym' },
    ]);
  });

  it('answers an old duration option name with the new one, and leaves other unknown keys as zod names them', () => {
    const schedule = { schema: z.object({ everyMs: z.number().optional() }).strict(), input: {} };
    expect(
      formatIssues(
        [{ code: 'unrecognized_keys', keys: ['every', 'color'], path: [], message: 'x' }],
        schedule,
      ),
    ).toEqual([
      { path: '', message: 'Unrecognized keys: "every", "color" (renamed: "every" is now "everyMs")' },
    ]);
    expect(
      formatIssues([{ code: 'unrecognized_keys', keys: ['color'], path: [], message: 'x' }], schedule),
    ).toEqual([{ path: '', message: 'Unrecognized key: "color"' }]);
  });

  it('names a new option only where the schema takes it, through optional, pipes and nested objects', () => {
    const rateLimit = z
      .object({ limit: z.number(), periodMs: z.number() })
      .strict()
      .transform((r) => r);
    const enqueue = z.object({ delayMs: z.number().optional(), rateLimit: rateLimit.optional() }).strict();
    const keys = (path: string[], k: string[]) => [
      { code: 'unrecognized_keys', keys: k, path, message: 'x' },
    ];
    const input = { rateLimit: { limit: 1, period: 5 } };
    expect(formatIssues(keys(['rateLimit'], ['period']), { schema: enqueue, input })).toEqual([
      { path: 'rateLimit', message: 'Unrecognized key: "period" (renamed: "period" is now "periodMs")' },
    ]);
    // `timeout` is an old name, but enqueue has no `timeoutMs`; `period` is one, but not of the root object.
    expect(formatIssues(keys([], ['timeout', 'period']), { schema: enqueue, input })).toEqual([
      { path: '', message: 'Unrecognized keys: "timeout", "period"' },
    ]);
    // The schema's complaint that the new name is missing is the hint's to answer, when the value left it out.
    const missing = { path: ['rateLimit', 'periodMs'], message: 'undefined is not a duration' };
    expect(formatIssues([missing, ...keys(['rateLimit'], ['period'])], { schema: enqueue, input })).toEqual([
      { path: 'rateLimit', message: 'Unrecognized key: "period" (renamed: "period" is now "periodMs")' },
    ]);
    const both = { rateLimit: { limit: 1, period: 5, periodMs: 'soon' } };
    const bad = { path: ['rateLimit', 'periodMs'], message: '"soon" is not a duration' };
    expect(formatIssues([bad, ...keys(['rateLimit'], ['period'])], { schema: enqueue, input: both })).toEqual(
      [
        { path: 'rateLimit.periodMs', message: '"soon" is not a duration' },
        { path: 'rateLimit', message: 'Unrecognized key: "period" (renamed: "period" is now "periodMs")' },
      ],
    );
    // A payload checked against a user's schema: no options were parsed, no hint.
    expect(formatIssues(keys([], ['delay']))).toEqual([{ path: '', message: 'Unrecognized key: "delay"' }]);
  });
});

describe('ApplicationFailure', () => {
  it('defaults to type ApplicationFailure, retryable, no details', () => {
    const failure = new ApplicationFailure('card declined');
    expect(failure).toMatchObject({ type: 'ApplicationFailure', nonRetryable: false, details: undefined });
    expect(failure.message).toBe('[APPLICATION_FAILURE] card declined');
  });

  it('builds retryable and non-retryable failures with the named constructors', () => {
    expect(ApplicationFailure.retryable('later', 'RateLimited', { waitMs: 5 })).toMatchObject({
      type: 'RateLimited',
      nonRetryable: false,
      details: { waitMs: 5 },
    });
    expect(ApplicationFailure.nonRetryable('never', 'CardDeclined')).toMatchObject({
      type: 'CardDeclined',
      nonRetryable: true,
    });
    expect(ApplicationFailure.nonRetryable('never').type).toBe('ApplicationFailure');
  });
});

describe('serializeFailure', () => {
  it('keeps type, nonRetryable and details of an ApplicationFailure, without the code prefix', () => {
    const error = ApplicationFailure.nonRetryable('card declined', 'CardDeclined', { code: 'do_not_honor' });
    const serialized = serializeFailure(error);
    expect(serialized).toEqual({
      type: 'CardDeclined',
      message: 'card declined',
      nonRetryable: true,
      code: 'APPLICATION_FAILURE',
      details: { code: 'do_not_honor' },
      stack: error.stack,
    });
  });

  it('keeps a retryable ApplicationFailure retryable', () => {
    expect(serializeFailure(ApplicationFailure.retryable('later', 'RateLimited')).nonRetryable).toBe(false);
  });

  it('converts a plain Error to its name and message, retryable, with its stack', () => {
    const error = new TypeError('x is not a function');
    expect(serializeFailure(error)).toEqual({
      type: 'TypeError',
      message: 'x is not a function',
      nonRetryable: false,
      stack: error.stack,
    });
  });

  it('uses the name a custom Error subclass sets', () => {
    class PaymentGatewayError extends Error {
      override name = 'PaymentGatewayError';
    }
    expect(serializeFailure(new PaymentGatewayError('503')).type).toBe('PaymentGatewayError');
  });

  it("falls back to type 'Error' for an Error whose name is empty", () => {
    const error = new Error('nameless');
    error.name = '';
    expect(serializeFailure(error).type).toBe('Error');
  });

  it('keeps the code of another PalisadeError and leaves it retryable', () => {
    const error = new LeaseLostError({
      operation: 'complete',
      stepLabel: 'charge#0',
      staleToken: 1n,
      currentToken: 2n,
      reason: 'superseded',
    });
    const serialized = serializeFailure(error);
    expect(serialized).toMatchObject({ type: 'LeaseLostError', code: 'LEASE_LOST', nonRetryable: false });
    expect(serialized.message).toBe(error.message);
  });

  it.each([
    ['a string', 'boom', 'non-Error value thrown: boom'],
    ['an object', { status: 503 }, 'non-Error value thrown: {"status":503}'],
    ['a number', 42, 'non-Error value thrown: 42'],
    ['undefined', undefined, 'non-Error value thrown: undefined'],
    ['null', null, 'non-Error value thrown: null'],
    ['a bigint', 7n, 'non-Error value thrown: 7'],
  ])("converts %s to a retryable failure of type 'Error' that shows the value", (_what, value, message) => {
    expect(serializeFailure(value)).toEqual({ type: 'Error', message, nonRetryable: false });
  });

  it('converts a circular object without throwing', () => {
    const value: Record<string, unknown> = {};
    value.self = value;
    expect(serializeFailure(value)).toEqual({
      type: 'Error',
      message: 'non-Error value thrown: [object Object]',
      nonRetryable: false,
    });
  });

  it('produces a form that survives a JSON round trip for an ApplicationFailure with JSON details', () => {
    const serialized = serializeFailure(ApplicationFailure.nonRetryable('no', 'T', { a: [1, 2] }));
    expect(JSON.parse(JSON.stringify(serialized))).toEqual(serialized);
  });
});

describe('ActivityFailure', () => {
  it('names the activity and the last failure', () => {
    const error = new ActivityFailure(
      'charge',
      { type: 'CardDeclined', message: 'declined', nonRetryable: true },
      { runId: 'r1' },
    );
    expect(error.message).toBe('[ACTIVITY_FAILURE] activity charge failed: CardDeclined: declined');
    expect(error.runId).toBe('r1');
    expect(error.failure.type).toBe('CardDeclined');
  });
});

describe('NonDeterminismError', () => {
  it('names the workflow, position, and both the recorded and the current step', () => {
    const error = new NonDeterminismError('settle', 2, 'activity charge', 'activity refund', 'r1');
    expect(error.message).toMatch(
      /^\[NON_DETERMINISM\] workflow settle replayed step 2 as activity refund, but history recorded activity charge;/,
    );
    expect(error).toMatchObject({ position: 2, recorded: 'activity charge', current: 'activity refund' });
    expect(error.runId).toBe('r1');
  });
});

describe('echoed', () => {
  it('repeats a short value whole and cuts a long one with a note of what it left out', () => {
    expect(echoed('run-1')).toBe('run-1');
    expect(echoed('x'.repeat(10_000))).toBe(`${'x'.repeat(ECHOED_CHARS)}…(9,900 more characters)`);
    expect(echoed('abcdef', 3)).toBe('abc…(3 more characters)');
  });

  it('never leaves half of a surrogate pair at the cut', () => {
    expect(echoed(`ab${'😀'.repeat(5)}`, 3)).toBe('ab…(10 more characters)');
  });

  it('caps each unknown key of an options error, whose zod message repeats them whole', () => {
    const error = new InvalidOptionsError(
      'start options of flow',
      formatIssues([{ code: 'unrecognized_keys', keys: ['k'.repeat(5_000)], path: [], message: 'x' }]),
    );
    expect(error.message.length).toBeLessThan(250);
    expect(error.message).toContain('…(4,900 more characters)');
  });
});
