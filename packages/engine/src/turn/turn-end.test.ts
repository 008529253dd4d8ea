/** How a turn ends (turn-end.ts): a promise no durable step settles, a refused call, the run's failures. */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ActivityFailure, defineWorkflow, type SerializedFailure } from '@palisade/sdk';
import { act, failure, step, turn, workflow } from './fixtures/turns.js';

const fast = act('fast');
const failed: SerializedFailure = { type: 'Boom', message: 'card declined', nonRetryable: true };

describe('runTurn: non-durable awaits', () => {
  it('fails with NON_DURABLE_AWAIT when the code waits on a promise no durable step will settle', async () => {
    const stuck = workflow('stuck', async (ctx) => {
      await ctx.run(fast, { n: 1 });
      await new Promise(() => undefined);
    });
    const error = failure(await turn(stuck, [step(0, 'activity', 'fast')]));
    expect(error.code).toBe('NON_DURABLE_AWAIT');
    expect(error.message).toContain('workflow stuck is waiting on a promise that is not a durable primitive');
  });

  it('rejects ctx.run with something that is not an activity, naming the workflow', async () => {
    const wrong = workflow('wrong', async (ctx) =>
      ctx.run({ kind: 'nope', name: 'x' } as unknown as typeof fast, { n: 1 }),
    );
    const error = failure(await turn(wrong, []));
    expect(error.code).toBe('INVALID_OPTIONS');
    expect(error.message).toContain('workflow wrong called ctx.run');
  });
});

describe('runTurn: failures', () => {
  it('rejects the await with an ActivityFailure the workflow can catch', async () => {
    const forgiving = workflow('forgiving', async (ctx) => {
      try {
        await ctx.run(fast, { n: 1 });
        return 'no';
      } catch (error) {
        if (!(error instanceof ActivityFailure)) throw error;
        return { activity: error.activityName, type: error.failure.type, message: error.message };
      }
    });
    const result = await turn(forgiving, [step(0, 'activity', 'fast', { status: 'failed', error: failed })]);
    expect(result.outcome).toEqual({
      kind: 'completed',
      output: {
        activity: 'fast',
        type: 'Boom',
        message: '[ACTIVITY_FAILURE] activity fast failed: Boom: card declined',
      },
    });
  });

  it('fails the run with the workflow’s own error when it does not catch', async () => {
    const strict = workflow('strict', async (ctx) => ctx.run(fast, { n: 1 }));
    const error = failure(
      await turn(strict, [step(0, 'activity', 'fast', { status: 'failed', error: failed })]),
    );
    expect(error.code).toBe('ACTIVITY_FAILURE');
  });

  it('fails the run naming the workflow when its output does not match the schema', async () => {
    const typed = defineWorkflow({
      name: 'typed',
      input: z.unknown(),
      output: z.object({ ok: z.literal(true) }),
      run: () => Promise.resolve({ ok: false as unknown as true }),
    });
    const error = failure(await turn(typed as unknown as ReturnType<typeof workflow>, []));
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.message).toContain('output of workflow typed');
  });
});
