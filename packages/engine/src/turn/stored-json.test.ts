/** `asStoredJson` (stored-json.ts): values as jsonb gives them back. */
import { describe, expect, it } from 'vitest';
import { asStoredJson } from './stored-json.js';

describe('asStoredJson', () => {
  it('orders object keys as jsonb returns them: shorter first, then by UTF-8 bytes, at every depth', () => {
    const value = asStoredJson({
      zeta: 1,
      b: { yy: 1, x: 2 },
      '10': 3,
      alpha: [{ bb: 1, a: 2 }],
      a: 5,
      é: 6,
    });
    expect(Object.keys(value as object)).toEqual(['10', 'a', 'b', 'é', 'zeta', 'alpha']);
    const v = value as { b: object; alpha: object[] };
    expect(Object.keys(v.b)).toEqual(['x', 'yy']);
    expect(Object.keys(v.alpha[0] as object)).toEqual(['a', 'bb']);
  });

  it('keeps what JSON keeps: undefined becomes null, toJSON applies, undefined members go', () => {
    const at = new Date('2026-12-02T00:00:00.000Z');
    expect(asStoredJson(undefined)).toBeNull();
    expect(asStoredJson({ at, gone: undefined, list: [undefined, 1] })).toEqual({
      at: '2026-12-02T00:00:00.000Z',
      list: [null, 1],
    });
  });
});
