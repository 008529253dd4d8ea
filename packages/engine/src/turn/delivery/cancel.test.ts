/** A cancel request reaching the code (cancel.ts, outcomes.ts): cancelled steps, compensation, a cancelled run. */
import { describe, expect, it } from 'vitest';
import { CancelledFailure } from '@palisade/sdk';
import { act, NOW_MS, step, turn, workflow } from '../fixtures/turns.js';

const fast = act('fast');
const slow = act('slow');
const compensate = act('compensate');

describe('runTurn: cancellation', () => {
  const careful = workflow('careful', async (ctx) => {
    try {
      await ctx.run(slow, { n: 1 });
      return 'finished';
    } catch (error) {
      if (!(error instanceof CancelledFailure)) throw error;
      await ctx.run(compensate, { n: 9 });
      throw error;
    }
  });

  it('rejects the pending await with CancelledFailure and lets the workflow schedule compensation', async () => {
    const result = await turn(careful, [step(0, 'activity', 'slow', { status: 'cancelled' })], {
      cancelRequested: true,
    });
    expect(result.outcome).toEqual({ kind: 'blocked' });
    expect(result.newSteps).toMatchObject([{ seq: 1, name: 'compensate', input: { n: 9 } }]);
  });

  it('ends the run cancelled when the workflow rethrows the CancelledFailure', async () => {
    const result = await turn(
      careful,
      [
        step(0, 'activity', 'slow', { status: 'cancelled', delivered_seq: 1 }),
        step(1, 'activity', 'compensate'),
      ],
      { cancelRequested: true },
    );
    expect(result.outcome.kind).toBe('cancelled');
    expect(result.outcome.kind === 'cancelled' && result.outcome.error.code).toBe('CANCELLED');
  });

  it('delivers a cancel requested before the first turn at the first step, recorded cancelled', async () => {
    const result = await turn(careful, [], { cancelRequested: true });
    expect(result.outcome).toEqual({ kind: 'blocked' });
    expect(result.newSteps).toMatchObject([
      { seq: 0, kind: 'activity', name: 'slow', cancelled: true, deliveredSeq: 1 },
      { seq: 1, kind: 'activity', name: 'compensate', input: { n: 9 } },
    ]);
    expect(result.newSteps[1]).not.toHaveProperty('cancelled');
  });

  it('replays a step recorded cancelled that way, then ends the run cancelled', async () => {
    const result = await turn(
      careful,
      [
        step(0, 'activity', 'slow', { status: 'cancelled', delivered_seq: 1, finished_ms: NOW_MS }),
        step(1, 'activity', 'compensate', { finished_ms: NOW_MS + 5 }),
      ],
      { cancelRequested: true },
    );
    expect(result.outcome.kind).toBe('cancelled');
    expect(result.newSteps).toEqual([]);
  });

  it('cancels every step the code is blocked on in position order, then lets it schedule freely', async () => {
    const order: string[] = [];
    const fanOut = workflow('fan-out', async (ctx) => {
      const results = await Promise.allSettled([
        ctx.run(fast, { n: 1 }),
        ctx.sleep('1h'),
        ctx.run(slow, { n: 2 }),
      ]);
      order.push(...results.map((r) => r.status));
      return ctx.run(compensate, { n: 3 }); // the code swallowed the cancel: this runs normally
    });
    const result = await turn(fanOut, [], { cancelRequested: true });
    expect(order).toEqual(['rejected', 'rejected', 'rejected']);
    expect(
      result.newSteps.map((s) => [
        s.seq,
        s.name,
        'cancelled' in s && s.cancelled,
        'deliveredSeq' in s && s.deliveredSeq,
      ]),
    ).toEqual([
      [0, 'fast', true, 1],
      [1, 'sleep', true, 2],
      [2, 'slow', true, 3],
      [3, 'compensate', false, false],
    ]);
    expect(result.outcome).toEqual({ kind: 'blocked' });
  });

  it('does not cancel new steps once the code has seen the cancel through a cancelled step', async () => {
    const result = await turn(
      careful,
      [step(0, 'activity', 'slow', { status: 'cancelled', delivered_seq: 1 })],
      { cancelRequested: true },
    );
    expect(result.newSteps).toHaveLength(1);
    expect(result.newSteps[0]).toMatchObject({ seq: 1, name: 'compensate' });
    expect(result.newSteps[0]).not.toHaveProperty('cancelled');
  });

  it('rejects a sleep cancelled while pending', async () => {
    const sleeper = workflow('sleeper', async (ctx) => {
      await ctx.sleep('1h');
    });
    const result = await turn(
      sleeper,
      [step(0, 'timer', 'sleep', { status: 'cancelled', due_ms: NOW_MS + 1e6 })],
      {
        cancelRequested: true,
      },
    );
    expect(result.outcome.kind).toBe('cancelled');
  });
});
