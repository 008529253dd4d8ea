/** Replay over recorded steps (replay.ts, replay-state.ts): scheduling, race winners, determinism checks. */
import { describe, expect, it } from 'vitest';
import { ActivityFailure, type SerializedFailure } from '@palisade/sdk';
import { act, failure, NOW_MS, step, turn, workflow } from './fixtures/turns.js';

const createUser = act('createUser');
const sendWelcome = act('sendWelcome');
const sendHello = act('sendHello');
const fast = act('fast');
const slow = act('slow');
const compensate = act('compensate');
const failed: SerializedFailure = { type: 'Boom', message: 'card declined', nonRetryable: true };

describe('runTurn: scheduling and replay', () => {
  const onboard = workflow('onboard', async (ctx) => {
    const user = await ctx.run(createUser, { n: 1 });
    const mail = await ctx.run(sendWelcome, { n: 2 });
    return { user, mail };
  });

  it('schedules the first call as step 0 and blocks on it', async () => {
    const result = await turn(onboard, []);
    expect(result.outcome).toEqual({ kind: 'blocked' });
    expect(result.deliveries).toEqual([]);
    expect(result.newSteps).toMatchObject([
      { seq: 0, kind: 'activity', name: 'createUser', input: { n: 1 }, queue: 'default' },
    ]);
  });

  it('hands recorded outputs back in position order and schedules only the next call', async () => {
    const result = await turn(onboard, [step(0, 'activity', 'createUser', { output: { id: 'u1' } })]);
    expect(result.outcome).toEqual({ kind: 'blocked' });
    expect(result.newSteps.map((s) => [s.seq, s.name])).toEqual([[1, 'sendWelcome']]);
    expect(result.deliveries).toEqual([
      { stepId: step(0, 'activity', '').id, seq: 0, deliveredSeq: 1, firesTimer: false },
    ]);
  });

  it('completes from history alone without scheduling anything', async () => {
    const result = await turn(onboard, [
      step(0, 'activity', 'createUser', { output: { id: 'u1' }, delivered_seq: 1 }),
      step(1, 'activity', 'sendWelcome', { output: 'sent' }),
    ]);
    expect(result.outcome).toEqual({ kind: 'completed', output: { user: { id: 'u1' }, mail: 'sent' } });
    expect(result.newSteps).toEqual([]);
    expect(result.deliveries.map((d) => d.deliveredSeq)).toEqual([2]);
  });

  it('produces identical steps, deliveries and outcome on every replay of the same history', async () => {
    const fanOut = workflow('fan-out', async (ctx) => {
      const [a, b] = await Promise.all([ctx.run(fast, { n: 1 }), ctx.run(slow, { n: 2 })]);
      await ctx.sleep('1m');
      return [a, b, await ctx.run(compensate, { n: 3 })];
    });
    const history = [
      step(0, 'activity', 'fast', { output: 'A', finished_ms: NOW_MS - 50 }),
      step(1, 'activity', 'slow', { output: 'B', finished_ms: NOW_MS - 60 }),
    ];
    const results = await Promise.all([1, 2, 3].map(() => turn(fanOut, history)));
    expect(results[1]).toEqual(results[0]);
    expect(results[2]).toEqual(results[0]);
    expect(results[0]?.newSteps).toMatchObject([{ seq: 2, kind: 'timer', name: 'sleep', delayMs: 60_000 }]);
    // New outcomes are delivered in the order they happened (slow finished first).
    expect(results[0]?.deliveries.map((d) => [d.stepId, d.deliveredSeq])).toEqual([
      [history[1]?.id, 1],
      [history[0]?.id, 2],
    ]);
  });

  it('runs independent turns at the same time without mixing their state', async () => {
    const [a, b] = await Promise.all([
      turn(onboard, [step(0, 'activity', 'createUser', { output: 'first' })]),
      turn(onboard, [
        step(0, 'activity', 'createUser', { output: 'second', delivered_seq: 1 }),
        step(1, 'activity', 'sendWelcome', { output: 'mail' }),
      ]),
    ]);
    expect(a.outcome).toEqual({ kind: 'blocked' });
    expect(b.outcome).toEqual({ kind: 'completed', output: { user: 'second', mail: 'mail' } });
  });
});

describe('runTurn: races keep their winner across replays', () => {
  const racer = workflow('racer', async (ctx) => {
    const winner = await Promise.race([
      ctx.run(slow, { n: 1 }).then(() => 'slow'),
      ctx.run(fast, { n: 2 }).then(() => 'fast'),
    ]);
    const after = await ctx.run(compensate, { n: 3 });
    return { winner, after };
  });

  it('lets the outcome that happened first win a fresh race', async () => {
    const result = await turn(racer, [
      step(0, 'activity', 'slow', { finished_ms: NOW_MS - 10 }),
      step(1, 'activity', 'fast', { finished_ms: NOW_MS - 20 }),
    ]);
    expect(result.newSteps).toMatchObject([{ seq: 2, name: 'compensate', input: { n: 3 } }]);
    // Both are delivered (the race settles after the first; the second is still handed over in order).
    expect(result.deliveries.map((d) => d.deliveredSeq)).toEqual([1, 2]);
    const replay = await turn(racer, [
      step(0, 'activity', 'slow', { finished_ms: NOW_MS - 10, delivered_seq: 2 }),
      step(1, 'activity', 'fast', { finished_ms: NOW_MS - 20, delivered_seq: 1 }),
      step(2, 'activity', 'compensate', { output: 'done' }),
    ]);
    expect(replay.outcome).toEqual({ kind: 'completed', output: { winner: 'fast', after: 'done' } });
  });

  it('replays the recorded winner even when a later-visible outcome carries an earlier finish time', async () => {
    // Turn 1 saw only `slow` (fast's commit was not visible yet) and delivered it: slow won.
    const first = await turn(racer, [
      step(0, 'activity', 'slow', { finished_ms: NOW_MS - 10 }),
      step(1, 'activity', 'fast', { status: 'running', finished_ms: null }),
    ]);
    // Scheduled after the code was handed slow's outcome (delivery 1): a retry withdrawing it retires the step.
    expect(first.newSteps.map((s) => [s.name, s.afterDeliveredSeq])).toEqual([['compensate', 1]]);
    expect(first.deliveries).toEqual([
      { stepId: step(0, 'activity', '').id, seq: 0, deliveredSeq: 1, firesTimer: false },
    ]);
    // Later `fast` is visible with a finish time *before* slow's; without delivered_seq it would win the replay.
    const history = [
      step(0, 'activity', 'slow', { finished_ms: NOW_MS - 10, delivered_seq: 1 }),
      step(1, 'activity', 'fast', { finished_ms: NOW_MS - 30 }),
      step(2, 'activity', 'compensate', { output: 'done', finished_ms: NOW_MS - 5 }),
    ];
    for (let i = 0; i < 3; i++) {
      const replay = await turn(racer, history);
      expect(replay.outcome).toEqual({ kind: 'completed', output: { winner: 'slow', after: 'done' } });
      expect(replay.newSteps).toEqual([]);
    }
  });

  it('settles Promise.allSettled with the recorded failure as an ActivityFailure', async () => {
    const settle = workflow('settle', async (ctx) => {
      const results = await Promise.allSettled([ctx.run(fast, { n: 1 }), ctx.run(slow, { n: 2 })]);
      return results.map((r) =>
        r.status === 'fulfilled'
          ? r.value
          : {
              isActivityFailure: r.reason instanceof ActivityFailure,
              code: (r.reason as ActivityFailure).code,
              failure: (r.reason as ActivityFailure).failure,
            },
      );
    });
    const result = await turn(settle, [
      step(0, 'activity', 'fast', { output: 'ok' }),
      step(1, 'activity', 'slow', { status: 'failed', error: failed }),
    ]);
    expect(result.outcome).toEqual({
      kind: 'completed',
      output: ['ok', { isActivityFailure: true, code: 'ACTIVITY_FAILURE', failure: failed }],
    });
  });
});

describe('runTurn: determinism checks', () => {
  const v1History = [
    step(0, 'activity', 'createUser', { output: 'u1', delivered_seq: 1 }),
    step(1, 'activity', 'sendWelcome', { output: 'sent', delivered_seq: 2 }),
    step(2, 'timer', 'sleep', { status: 'scheduled', due_ms: NOW_MS + 10_000, finished_ms: null }),
  ];

  it('fails the run with NON_DETERMINISM naming the position and both names when a step was renamed', async () => {
    const v2 = workflow('onboard', async (ctx) => {
      await ctx.run(createUser, { n: 1 });
      await ctx.run(sendHello, { n: 2 });
      await ctx.sleep('10s');
    });
    const result = await turn(v2, v1History);
    const error = failure(result);
    expect(error.code).toBe('NON_DETERMINISM');
    expect(error.type).toBe('NonDeterminismError');
    expect(error.message).toContain('workflow onboard replayed step 1 as activity sendHello');
    expect(error.message).toContain('history recorded activity sendWelcome');
    expect(result.newSteps).toEqual([]);
    expect(result.deliveries).toEqual([]);
  });

  it('fails at position 0 when the first two steps were swapped, never handing createUser’s result to sendWelcome', async () => {
    let handed: unknown = 'nothing';
    const v2 = workflow('onboard', async (ctx) => {
      handed = await ctx.run(sendWelcome, { n: 2 });
      await ctx.run(createUser, { n: 1 });
    });
    const error = failure(await turn(v2, v1History));
    expect(error.code).toBe('NON_DETERMINISM');
    expect(error.message).toContain('replayed step 0 as activity sendWelcome');
    expect(error.message).toContain('recorded activity createUser');
    expect(handed).toBe('nothing');
  });

  it('fails when a step is inserted before recorded ones (the kinds differ too)', async () => {
    const v2 = workflow('onboard', async (ctx) => {
      await ctx.run(createUser, { n: 1 });
      await ctx.run(sendWelcome, { n: 2 });
      await ctx.run(sendHello, { n: 3 });
      await ctx.sleep('10s');
    });
    const error = failure(await turn(v2, v1History));
    expect(error.message).toContain('replayed step 2 as activity sendHello');
    expect(error.message).toContain('recorded timer sleep');
  });

  it('accepts a changed body and a step added after the recorded ones', async () => {
    const v2 = workflow('onboard', async (ctx) => {
      await ctx.run(createUser, { n: 100 }); // input changed: replay matches on kind and name only
      await ctx.run(sendWelcome, { n: 200 });
      await ctx.sleep('10s');
      await ctx.run(sendHello, { n: 3 });
      return 'v2';
    });
    const due = await turn(v2, v1History, { nowMs: NOW_MS + 10_000 });
    expect(due.newSteps.map((s) => [s.seq, s.name])).toEqual([[3, 'sendHello']]);
    expect(due.deliveries).toEqual([{ stepId: v1History[2]?.id, seq: 2, deliveredSeq: 3, firesTimer: true }]);
  });

  it('fails instead of completing when the code ends before a recorded step (a step was removed)', async () => {
    const v2 = workflow('onboard', async (ctx) => {
      await ctx.run(createUser, { n: 1 });
      return 'short';
    });
    const result = await turn(v2, v1History);
    const error = failure(result);
    expect(error.code).toBe('NON_DETERMINISM');
    expect(error.message).toContain('replayed step 1 as no call (the workflow ended first)');
    expect(error.message).toContain('history recorded activity sendWelcome');
    expect(result.newSteps).toEqual([]);
  });
});
