import { describe, expect, it } from 'vitest';
import { isPalisadeError, serializeFailure, ApplicationFailure, type ValidationError } from './errors.js';
import { jsonProblems, storableText, textProblem, utf8Bytes } from './json-value.js';
import { PAYLOAD_LIMITS, checkPayload, checkText } from './payload.js';

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

describe('checkPayload', () => {
  const circular: Record<string, unknown> = { a: 1 };
  circular.self = circular;
  it.each([
    ['a NUL in a string', { s: 'a\u0000b' }, 's', 'NUL'],
    ['a lone high surrogate', { s: 'a\uD800' }, 's', 'lone surrogate'],
    ['a lone low surrogate in a nested array', { a: [['x', '\uDC00']] }, 'a.0.1', 'lone surrogate'],
    ['a NUL in a key', { ['k\u0000']: 1 }, 'k\\u0000', 'its key contains a NUL'],
    ['a BigInt', { n: 5n }, 'n', 'BigInt'],
    ['NaN', { x: Number.NaN }, 'x', 'NaN is not JSON'],
    ['Infinity', { x: [Number.POSITIVE_INFINITY] }, 'x.0', 'Infinity is not JSON'],
    ['undefined in an array', { x: [1, undefined] }, 'x.1', 'come back as null'],
    ['a function', { f: () => 1 }, 'f', 'function'],
    ['a Date', { at: new Date(0) }, 'at', 'Date would come back as a string'],
    ['a Map', { m: new Map() }, 'm', 'Map would come back as {}'],
    ['a Set', { s: new Set([1]) }, 's', 'Set'],
    ['a class instance', { u: new URL('http://x') }, 'u', 'a URL'],
    ['a cycle', circular, 'self', 'circular'],
  ])('refuses %s with VALIDATION_FAILED naming the path', (_name, value, path, message) => {
    const error = thrown(() => checkPayload(value, 'input of activity charge', 1_000_000));
    expect(isPalisadeError(error, 'VALIDATION_FAILED')).toBe(true);
    expect((error as ValidationError).issues[0]).toEqual({
      path,
      message: expect.stringContaining(message) as unknown,
    });
    expect((error as Error).message).toContain('input of activity charge');
    expect((error as Error).message).toContain(`${path}:`);
  });

  it('returns the JSON text of a value that survives the round trip', () => {
    const value = { a: [1, 'é', null, true, { b: -0.5 }], c: 'emoji 😀', d: undefined };
    expect(checkPayload(value, 'x', 1_000)).toBe(JSON.stringify(value));
    expect(checkPayload(undefined, 'x', 1_000)).toBe('null');
  });

  it('refuses a payload over its byte limit with PAYLOAD_TOO_LARGE, counting UTF-8 bytes', () => {
    const error = thrown(() => checkPayload({ s: 'é'.repeat(600) }, 'output of activity big', 1_000));
    expect(isPalisadeError(error, 'PAYLOAD_TOO_LARGE')).toBe(true);
    expect((error as Error).message).toMatch(
      /output of activity big is 1,208 bytes of JSON, over the limit of 1,000/,
    );
  });

  it('refuses nesting deeper than the limit rather than overflowing the stack', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 10_000; i++) deep = [deep];
    expect(jsonProblems(deep)[0]?.message).toMatch(/nested deeper than 256/);
  });
});

describe('checkText', () => {
  it('refuses a NUL, a lone surrogate and an overlong text with INVALID_OPTIONS naming the parameter', () => {
    for (const bad of ['a\u0000', '\uD83D', 'x'.repeat(5_000)]) {
      const error = thrown(() => checkText(bad, 'cancel reason'));
      expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
      expect((error as Error).message).toContain('invalid cancel reason');
    }
    expect(checkText('fine 😀', 'cancel reason')).toBe('fine 😀');
  });
});

describe('storable text and failures', () => {
  it('finds no problem in a surrogate pair and counts it as 4 bytes', () => {
    expect(textProblem('😀')).toBeUndefined();
    expect(utf8Bytes('😀é')).toBe(6);
  });

  it('cuts a long text to the limit with a note of its length, never splitting a surrogate pair', () => {
    const cut = storableText('😀'.repeat(1_000), 100);
    expect(cut.length).toBeLessThanOrEqual(100);
    expect(cut).toMatch(/\[cut: 2,000 characters in all\]$/);
    expect(textProblem(cut)).toBeUndefined();
  });

  it('stores a thrown error whose message has NUL characters and is 5 MB, cut and cleaned', () => {
    const failure = serializeFailure(new Error(`x\u0000${'y'.repeat(5_000_000)}`));
    expect(failure.message.length).toBeLessThanOrEqual(PAYLOAD_LIMITS.errorMessageChars);
    expect(failure.message.startsWith('x\uFFFDy')).toBe(true);
    expect(textProblem(failure.message)).toBeUndefined();
    expect(textProblem(failure.stack ?? '')).toBeUndefined();
  });

  it('drops failure details that are not JSON, saying so in the message', () => {
    const failure = serializeFailure(ApplicationFailure.nonRetryable('boom', 'Bad', { n: 1n }));
    expect(failure.details).toBeUndefined();
    expect(failure.message).toBe(
      'boom [details dropped: n: 1n is a BigInt, which is not JSON: pass it as a string or a number]',
    );
    expect(failure.nonRetryable).toBe(true);
  });
});
