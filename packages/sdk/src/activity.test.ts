import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ACTIVITY_DEFAULTS,
  defineActivity,
  type ActivityContext,
  type ActivityOptions,
  type ActivityDefinition,
} from './activity.js';
import { InvalidOptionsError } from './errors.js';
import { RETRY_DEFAULTS } from './retry-policy.js';

const input = z.object({ invoiceId: z.string() });
const output = z.object({ chargeId: z.string() });

function options(over: Partial<ActivityOptions<typeof input, typeof output>> = {}) {
  return {
    name: 'charge',
    input,
    output,
    run: (i: z.output<typeof input>) => Promise.resolve({ chargeId: `ch_${i.invoiceId}` }),
    ...over,
  };
}

/** Call defineActivity with options a caller could pass from untyped code, expecting it to refuse them. */
function refused(bad: Record<string, unknown>): InvalidOptionsError {
  try {
    defineActivity({ ...options(), ...bad });
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidOptionsError);
    return error as InvalidOptionsError;
  }
  throw new Error('expected defineActivity to throw an InvalidOptionsError');
}

describe('defineActivity', () => {
  it('fills the defaults for timeouts, lease, queue and retry policy', () => {
    const charge = defineActivity(options());
    expect(charge.kind).toBe('activity');
    expect(charge.name).toBe('charge');
    expect(charge.startToCloseTimeoutMs).toBe(ACTIVITY_DEFAULTS.startToCloseTimeoutMs);
    expect(charge.startToCloseTimeoutMs).toBe(600_000);
    expect(charge.leaseMs).toBe(30_000);
    expect(charge.queue).toBe('default');
    expect(charge.retry).toMatchObject({
      maximumAttempts: RETRY_DEFAULTS.maximumAttempts,
      initialIntervalMs: 1_000,
      maximumIntervalMs: 100_000,
    });
  });

  it('keeps the schemas it was given', () => {
    const charge = defineActivity(options());
    expect(charge.input).toBe(input);
    expect(charge.output).toBe(output);
  });

  it('converts duration strings and resolves the retry policy', () => {
    const charge = defineActivity(
      options({
        leaseMs: '10s',
        startToCloseTimeoutMs: '5m',
        queue: 'payments',
        retry: { maximumAttempts: 5 },
      }),
    );
    expect(charge.leaseMs).toBe(10_000);
    expect(charge.startToCloseTimeoutMs).toBe(300_000);
    expect(charge.queue).toBe('payments');
    expect(charge.retry.maximumAttempts).toBe(5);
  });

  it('returns a frozen definition', () => {
    const charge = defineActivity(options());
    expect(Object.isFrozen(charge)).toBe(true);
    expect(() => {
      (charge as { leaseMs: number }).leaseMs = 1;
    }).toThrow(TypeError);
  });

  it('calls the given run function with the input and context', async () => {
    const seen: unknown[] = [];
    const charge: ActivityDefinition<typeof input, typeof output> = defineActivity(
      options({
        run: (i, ctx) => {
          seen.push(i, ctx);
          return Promise.resolve({ chargeId: 'ch_1' });
        },
      }),
    );
    const ctx = { marker: true } as unknown as ActivityContext;
    await expect(charge.run({ invoiceId: 'inv_1' }, ctx)).resolves.toEqual({ chargeId: 'ch_1' });
    expect(seen).toEqual([{ invoiceId: 'inv_1' }, ctx]);
  });

  it.each(['', 'has space', 'slash/name', 'x'.repeat(129)])(
    'refuses the name %j, naming the path',
    (name) => {
      const error = refused({ name });
      expect(error.code).toBe('INVALID_OPTIONS');
      expect(error.issues).toEqual([
        { path: 'name', message: 'must be 1–128 characters of letters, digits, and _ . : -' },
      ]);
    },
  );

  it('accepts names made of letters, digits and _ . : -', () => {
    expect(defineActivity(options({ name: 'billing.charge:v2_final-1' })).name).toBe(
      'billing.charge:v2_final-1',
    );
  });

  it('refuses a missing name', () => {
    const error = refused({ name: undefined });
    expect(error.issues.map((i) => i.path)).toEqual(['name']);
  });

  it('refuses a lease string that is not a duration, naming leaseMs and the activity', () => {
    const error = refused({ leaseMs: '30 seconds' });
    expect(error.issues).toHaveLength(1);
    expect(error.issues[0]?.path).toBe('leaseMs');
    expect(error.message).toMatch(
      /^\[INVALID_OPTIONS\] invalid activity charge: leaseMs: "30 seconds" is not/,
    );
  });

  it('refuses a negative lease', () => {
    expect(refused({ leaseMs: -1 }).issues[0]?.path).toBe('leaseMs');
  });

  it('refuses a start-to-close timeout of zero', () => {
    expect(refused({ startToCloseTimeoutMs: 0 }).issues).toEqual([
      { path: 'startToCloseTimeoutMs', message: 'must be > 0' },
    ]);
  });

  it('refuses a bad queue name', () => {
    expect(refused({ queue: 'no spaces' }).issues.map((i) => i.path)).toEqual(['queue']);
  });

  it('refuses a missing run function, naming the path run', () => {
    const error = refused({ run: undefined });
    expect(error.issues).toEqual([{ path: 'run', message: 'must be a function' }]);
    expect(error.message).toBe('[INVALID_OPTIONS] invalid activity charge: run: must be a function');
  });

  it('refuses an input or output that is not a zod schema', () => {
    expect(refused({ input: { parse: () => 1 } }).issues).toEqual([
      { path: 'input', message: 'must be a zod schema' },
    ]);
    expect(refused({ output: undefined }).issues).toEqual([
      { path: 'output', message: 'must be a zod schema' },
    ]);
  });

  it('refuses a bad retry policy, naming the activity and the field', () => {
    const error = refused({ retry: { maximumAttempts: 0 } });
    expect(error.message).toBe(
      '[INVALID_OPTIONS] invalid activity charge retry: maximumAttempts: must be ≥ 1',
    );
  });
});

describe('defineActivity option checks', () => {
  it('refuses an unknown option such as a mis-cased leaseMS', () => {
    expect(() =>
      defineActivity({
        name: 'typo',
        input: z.object({}),
        output: z.object({}),
        leaseMS: 5,
        run: () => Promise.resolve({}),
      } as unknown as Parameters<typeof defineActivity>[0]),
    ).toThrow(/leaseMS/);
  });

  it('refuses a start-to-close timeout beyond what the database column holds', () => {
    expect(() =>
      defineActivity({
        name: 'forever',
        input: z.object({}),
        output: z.object({}),
        startToCloseTimeoutMs: '30d',
        run: () => Promise.resolve({}),
      }),
    ).toThrow(/startToCloseTimeoutMs: "30d" is too long: must be ≤ 2,147,483,647 ms \(about 24.9 days\)/);
  });
});
