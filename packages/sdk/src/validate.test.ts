import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ValidationError } from './errors.js';
import { validate } from './validate.js';

describe('validate', () => {
  const schema = z.object({ items: z.array(z.object({ amountCents: z.number().int().positive() })) });

  it('returns the parsed value, with transforms applied', () => {
    const trimmed = z.object({ name: z.string().trim() });
    expect(validate(trimmed, { name: '  ada ' }, 'input of activity greet')).toEqual({ name: 'ada' });
  });

  it('throws a ValidationError naming the boundary and the dotted field path', () => {
    let caught: unknown;
    try {
      validate(schema, { items: [{ amountCents: 5 }, { amountCents: -1 }] }, 'input of activity charge', {
        runId: 'r1',
        attempt: 2,
      });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(ValidationError);
    const error = caught as ValidationError;
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.message).toMatch(
      /^\[VALIDATION_FAILED\] input of activity charge is invalid: items\.1\.amountCents: /,
    );
    expect(error.issues.map((i) => i.path)).toEqual(['items.1.amountCents']);
    expect(error).toMatchObject({ runId: 'r1', attempt: 2 });
  });

  it('names the root when the whole value is wrong', () => {
    expect(() => validate(schema, 'nope', 'output of activity charge')).toThrow(
      /output of activity charge is invalid: \(root\): /,
    );
  });
});
