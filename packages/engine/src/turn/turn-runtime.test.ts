import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  ActivityFailure,
  CancelledFailure,
  defineActivity,
  defineSignal,
  defineWorkflow,
  type SerializedFailure,
  type WorkflowContext,
} from '@palisade/sdk';
import type { HistoryStepRow } from '../queries/claim-turns.js';
import { runTurn, type TurnInput, type TurnResult } from './turn-runtime.js';

// Activities are never executed here: runTurn only schedules steps and replays recorded outcomes.
const act = (name: string) =>
  defineActivity({
    name,
    input: z.object({ n: z.number() }).default({ n: 0 }),
    output: z.unknown(),
    run: () => Promise.resolve(null),
  });
const createUser = act('createUser');
const sendWelcome = act('sendWelcome');
const sendHello = act('sendHello');
const fast = act('fast');
const slow = act('slow');
const compensate = act('compensate');

const NOW_MS = Date.parse('2030-01-01T00:00:00Z');
/** The process's own `Math.random` and `Date`, as loaded. */
const processRandom = Math.random;
const ProcessDate = Date;

/** A recorded step, as loadRunHistory returns it; completed by default. */
function step(seq: number, kind: HistoryStepRow['kind'], name: string, over: Partial<HistoryStepRow> = {}) {
  return {
    id: `00000000-0000-4000-8000-${String(seq).padStart(12, '0')}`,
    seq,
    kind,
    name,
    status: 'completed',
    output: null,
    error: null,
    delivered_seq: null,
    due_ms: null,
    finished_ms: NOW_MS - 1_000 + seq,
    ...over,
  } satisfies HistoryStepRow;
}

function workflow<O>(name: string, run: (ctx: WorkflowContext) => Promise<O>) {
  return defineWorkflow({ name, input: z.unknown(), output: z.unknown(), run: (_input, ctx) => run(ctx) });
}

function turn(
  wf: ReturnType<typeof workflow>,
  history: HistoryStepRow[],
  over: Partial<TurnInput> = {},
): Promise<TurnResult> {
  return runTurn({
    workflow: wf,
    info: {
      runId: '11111111-1111-4111-8111-111111111111',
      workflowName: wf.name,
      turnAttempt: 1,
      queue: 'q',
    },
    input: null,
    priority: 0,
    history,
    nowMs: NOW_MS,
    cancelRequested: false,
    ...over,
  });
}

function failure(result: TurnResult): SerializedFailure {
  if (result.outcome.kind !== 'failed') throw new Error(`expected failed, got ${result.outcome.kind}`);
  return result.outcome.error;
}

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

  it('gives Math.random() in workflow code numbers seeded from the run id: the same on every replay', async () => {
    const draws: number[][] = [];
    const coin = workflow('coin', async (ctx) => {
      draws.push([Math.random(), Math.random()]);
      await ctx.sleep('10s');
    });
    await turn(coin, []);
    await turn(coin, []);
    await turn(coin, [], {
      info: {
        runId: '22222222-2222-4222-8222-222222222222',
        workflowName: 'coin',
        turnAttempt: 1,
        queue: 'q',
      },
    });
    const [first, replay, otherRun] = draws as [number[], number[], number[]];
    expect(replay).toEqual(first);
    expect(first[0]).not.toBe(first[1]);
    expect(otherRun).not.toEqual(first);
    // Outside workflow code, and after the turn, Math.random is the process's own.
    expect(Math.random).toBe(processRandom);
  });

  it('gives Date.now() and new Date() in workflow code the run start, then the time of each outcome it is handed', async () => {
    const seen: number[][] = [];
    const timed = workflow('timed', async (ctx) => {
      seen.push([Date.now(), new Date().getTime(), Date.parse(Date())]);
      await ctx.run(createUser, { n: 1 });
      seen.push([Date.now(), new Date().getTime()]);
      await ctx.sleep('1s');
      seen.push([Date.now(), new Date().getTime(), new Date(7).getTime()]);
      expect(new Date()).toBeInstanceOf(Date);
      expect(new Date()).toBeInstanceOf(ProcessDate);
    });
    const startedMs = NOW_MS - 5_000;
    const history = [
      step(0, 'activity', 'createUser', { delivered_seq: 1, finished_ms: NOW_MS - 2_000.4 }),
      // Fires in this turn: no recorded time yet; the turn's own (whole ms), which its commit records.
      step(1, 'timer', 'sleep', { status: 'scheduled', due_ms: NOW_MS - 10, finished_ms: null }),
    ];
    const result = await turn(timed, history, { startedMs: startedMs + 0.7, nowMs: NOW_MS + 0.9 });
    expect(result.outcome.kind).toBe('completed');
    expect(seen).toEqual([
      [startedMs, startedMs, Math.floor(startedMs / 1000) * 1000],
      [NOW_MS - 2_001, NOW_MS - 2_001],
      [NOW_MS, NOW_MS, 7],
    ]);
    // The process's own clock and Date outside workflow code, and after the turn.
    expect(Date).toBe(ProcessDate);
    expect(Date.now.name).toBe('now');
    expect(Math.abs(Date.now() - performance.timeOrigin - performance.now())).toBeLessThan(1_000);
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

describe('runTurn: durable timers and recorded values', () => {
  const napper = workflow('napper', async (ctx) => {
    const before = ctx.now().getTime();
    await ctx.sleep('5m');
    await ctx.sleepUntil(new Date(NOW_MS + 3_600_000));
    return { before, after: ctx.now().getTime(), r: ctx.random(), id: ctx.uuid() };
  });

  it('records ctx.now() in whole milliseconds, exactly the value the code saw', async () => {
    let seen = 0;
    const clock = workflow('clock', async (ctx) => {
      seen = ctx.now().getTime();
      await ctx.sleep('1s');
    });
    const result = await turn(clock, [], { nowMs: NOW_MS + 0.875 });
    expect(seen).toBe(NOW_MS);
    expect(result.newSteps[0]).toEqual({
      seq: 0,
      kind: 'value',
      name: 'now',
      output: NOW_MS,
      afterDeliveredSeq: 0,
    });
  });

  it('records ctx.now() as a value step and schedules the sleep with its delay', async () => {
    const result = await turn(napper, []);
    expect(result.outcome).toEqual({ kind: 'blocked' });
    expect(result.newSteps).toEqual([
      { seq: 0, kind: 'value', name: 'now', output: NOW_MS, afterDeliveredSeq: 0 },
      { seq: 1, kind: 'timer', name: 'sleep', delayMs: 300_000, afterDeliveredSeq: 0 },
    ]);
  });

  it('keeps blocking until the timer is due by the claim’s database time, then fires it', async () => {
    const history = [
      step(0, 'value', 'now', { output: NOW_MS }),
      step(1, 'timer', 'sleep', { status: 'scheduled', due_ms: NOW_MS + 300_000, finished_ms: null }),
    ];
    const early = await turn(napper, history, { nowMs: NOW_MS + 299_999 });
    expect(early).toEqual({ newSteps: [], deliveries: [], outcome: { kind: 'blocked' } });
    const due = await turn(napper, history, { nowMs: NOW_MS + 300_000 });
    expect(due.deliveries).toEqual([{ stepId: history[1]?.id, seq: 1, deliveredSeq: 1, firesTimer: true }]);
    // Scheduled after the code saw the first timer fire (delivery 1).
    expect(due.newSteps).toEqual([
      { seq: 2, kind: 'timer', name: 'sleep', dueAtMs: NOW_MS + 3_600_000, afterDeliveredSeq: 1 },
    ]);
  });

  it('replays now, random and uuid from history whatever the clock and randomness say now', async () => {
    const history = [
      step(0, 'value', 'now', { output: NOW_MS }),
      step(1, 'timer', 'sleep', { due_ms: NOW_MS + 300_000, delivered_seq: 1 }),
      step(2, 'timer', 'sleep', { due_ms: NOW_MS + 3_600_000, delivered_seq: 2 }),
      step(3, 'value', 'now', { output: NOW_MS + 3_600_001 }),
      step(4, 'value', 'random', { output: 0.25 }),
      step(5, 'value', 'uuid', { output: 'aaaaaaaa-0000-4000-8000-000000000000' }),
    ];
    for (const nowMs of [NOW_MS + 4_000_000, NOW_MS + 9_000_000]) {
      const result = await turn(napper, history, { nowMs });
      expect(result.outcome).toEqual({
        kind: 'completed',
        output: {
          before: NOW_MS,
          after: NOW_MS + 3_600_001,
          r: 0.25,
          id: 'aaaaaaaa-0000-4000-8000-000000000000',
        },
      });
      expect(result.newSteps).toEqual([]);
    }
  });

  it('records fresh values the first time and hands the same ones to the workflow', async () => {
    const history = [
      step(0, 'value', 'now', { output: NOW_MS }),
      step(1, 'timer', 'sleep', { due_ms: NOW_MS + 300_000, delivered_seq: 1 }),
      step(2, 'timer', 'sleep', { due_ms: NOW_MS + 3_600_000, delivered_seq: 2 }),
    ];
    const result = await turn(napper, history, { nowMs: NOW_MS + 3_600_500 });
    if (result.outcome.kind !== 'completed') throw new Error(result.outcome.kind);
    const output = result.outcome.output as { after: number; r: number; id: string };
    expect(result.newSteps).toEqual([
      { seq: 3, kind: 'value', name: 'now', output: NOW_MS + 3_600_500, afterDeliveredSeq: 2 },
      { seq: 4, kind: 'value', name: 'random', output: output.r, afterDeliveredSeq: 2 },
      { seq: 5, kind: 'value', name: 'uuid', output: output.id, afterDeliveredSeq: 2 },
    ]);
    expect(output.after).toBe(NOW_MS + 3_600_500);
    expect(output.id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('fails with NON_DETERMINISM when a recorded value is asked for under another name', async () => {
    const swapped = workflow('napper', async (ctx) => {
      ctx.random();
      await ctx.sleep('5m');
    });
    const error = failure(await turn(swapped, [step(0, 'value', 'now', { output: NOW_MS })]));
    expect(error.message).toContain('replayed step 0 as value random');
    expect(error.message).toContain('recorded value now');
  });
});

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

describe('runTurn: non-durable awaits', () => {
  it('fails with NON_DURABLE_AWAIT naming the workflow when workflow code starts a timer', async () => {
    const napper = workflow('timer-napper', async (ctx) => {
      await ctx.run(fast, { n: 1 });
      await new Promise((resolve) => setTimeout(resolve, 1));
      return 'unreachable in a durable world';
    });
    const result = await turn(napper, [step(0, 'activity', 'fast')]);
    const error = failure(result);
    expect(error.code).toBe('NON_DURABLE_AWAIT');
    expect(error.message).toContain('workflow timer-napper');
    expect(error.message).toContain('Timeout');
    expect(result.newSteps).toEqual([]);
  });

  it('fails with NON_DURABLE_AWAIT when workflow code calls fetch', async () => {
    const server = createServer((_req, res) => res.end('ok'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const fetcher = workflow('fetcher', async () => {
        const res = await fetch(`http://127.0.0.1:${port}/`);
        return res.status;
      });
      const result = await turn(fetcher, []);
      const error = failure(result);
      expect(error.code).toBe('NON_DURABLE_AWAIT');
      expect(error.message).toContain('workflow fetcher started a TCPWRAP');
      expect(result.newSteps).toEqual([]);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('fails with NON_DURABLE_AWAIT when the code waits on a promise no durable step will settle', async () => {
    const stuck = workflow('stuck', async (ctx) => {
      await ctx.run(fast, { n: 1 });
      await new Promise(() => undefined);
    });
    const error = failure(await turn(stuck, [step(0, 'activity', 'fast')]));
    expect(error.code).toBe('NON_DURABLE_AWAIT');
    expect(error.message).toContain('workflow stuck is waiting on a promise that is not a durable primitive');
  });

  it('does not blame a well-behaved turn for timers started outside workflow code at the same time', async () => {
    const good = workflow('good', async (ctx) => ctx.run(fast, { n: 1 }));
    const timers = Array.from({ length: 5 }, () => new Promise((resolve) => setTimeout(resolve, 0)));
    const [result] = await Promise.all([turn(good, [step(0, 'activity', 'fast', { output: 7 })]), ...timers]);
    expect(result.outcome).toEqual({ kind: 'completed', output: 7 });
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

describe('runTurn: signals', () => {
  const note = defineSignal({ name: 'note', payload: z.string() });
  const other = defineSignal({ name: 'other', payload: z.number() });
  const signal = (id: number, name: string, payload: unknown, receivedMs: number) => ({
    id: String(id),
    name,
    payload,
    received_ms: receivedMs,
  });

  it('hands buffered signals to new waits in arrival order, by name, recording each wait taken', async () => {
    const wf = workflow('two-notes', async (ctx) => {
      const a = await ctx.waitForSignal(note);
      const n = await ctx.waitForSignal(other);
      const b = await ctx.waitForSignal(note);
      return [a, n, b];
    });
    const result = await turn(wf, [], {
      signals: [
        signal(7, 'note', 'first', NOW_MS - 30),
        signal(8, 'other', 42, NOW_MS - 20),
        signal(9, 'note', 'second', NOW_MS - 10),
      ],
    });
    expect(result.outcome).toEqual({ kind: 'completed', output: ['first', 42, 'second'] });
    expect(
      result.newSteps.map((s) => [s.seq, s.kind, s.name, 'signalId' in s ? s.signalId : undefined]),
    ).toEqual([
      [0, 'signal', 'note', '7'],
      [1, 'signal', 'other', '8'],
      [2, 'signal', 'note', '9'],
    ]);
    expect(result.deliveries).toEqual([]);
  });

  it('completes a recorded wait with a new signal by position, and replays it with the payload it took', async () => {
    const wf = workflow('one-note', async (ctx) => `got ${await ctx.waitForSignal(note)}`);
    const waiting = [step(0, 'signal', 'note', { status: 'scheduled', finished_ms: null })];
    const first = await turn(wf, waiting, { signals: [signal(3, 'note', 'hi', NOW_MS - 5)] });
    expect(first.outcome).toEqual({ kind: 'completed', output: 'got hi' });
    expect(first.deliveries).toEqual([
      { stepId: null, seq: 0, deliveredSeq: 1, firesTimer: false, signalId: '3' },
    ]);
    // Replayed from the recorded outcome, whatever is pending now.
    const recorded = [
      step(0, 'signal', 'note', { output: { signalId: '3', payload: 'hi' }, delivered_seq: 1 }),
    ];
    const replay = await turn(wf, recorded, { signals: [signal(4, 'note', 'other', NOW_MS - 1)] });
    expect(replay.outcome).toEqual({ kind: 'completed', output: 'got hi' });
    expect(replay.deliveries).toEqual([]);
  });

  it('times out a wait whose timeout came before the signal, and lets a signal that came first win', async () => {
    const wf = workflow('patient', async (ctx) => {
      const w = await ctx.waitForSignal(note, { timeout: '1m' });
      return w.timedOut ? 'timed out' : w.payload;
    });
    const due = NOW_MS - 100;
    const waiting = [step(0, 'signal', 'note', { status: 'scheduled', due_ms: due, finished_ms: null })];
    const late = await turn(wf, waiting, { signals: [signal(5, 'note', 'late', due + 50)] });
    expect(late.outcome).toEqual({ kind: 'completed', output: 'timed out' });
    expect(late.deliveries).toEqual([{ stepId: waiting[0]?.id, seq: 0, deliveredSeq: 1, firesTimer: true }]);
    const early = await turn(wf, waiting, { signals: [signal(5, 'note', 'early', due - 50)] });
    expect(early.outcome).toEqual({ kind: 'completed', output: 'early' });
    expect(early.deliveries).toEqual([
      { stepId: null, seq: 0, deliveredSeq: 1, firesTimer: false, signalId: '5' },
    ]);
    const stored = [step(0, 'signal', 'note', { output: { timedOut: true }, delivered_seq: 1 })];
    expect((await turn(wf, stored)).outcome).toEqual({ kind: 'completed', output: 'timed out' });
  });

  it('fails a wait for something that is not a signal at the call, naming it', async () => {
    const wf = workflow('bad-wait', (ctx) => ctx.waitForSignal({ name: 'note' } as unknown as typeof note));
    expect(failure(await turn(wf, [])).message).toMatch(
      /waitForSignal\(undefined\).*defineSignal|signal: must be a signal from defineSignal/s,
    );
  });
});

describe('runTurn: patches', () => {
  const v2 = workflow('patched', async (ctx) => {
    const a = await ctx.run(createUser, { n: 1 });
    if (ctx.patched('hello')) await ctx.run(sendHello, { n: 1 });
    return [a, await ctx.run(sendWelcome, { n: 1 })];
  });

  it('takes the new branch past the history, recording the patch, and replays it', async () => {
    const first = await turn(v2, [step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 })]);
    expect(first.newSteps.map((s) => [s.seq, s.kind, s.name])).toEqual([
      [1, 'value', 'patch:hello'],
      [2, 'activity', 'sendHello'],
    ]);
    const replay = await turn(v2, [
      step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 }),
      step(1, 'value', 'patch:hello', { output: true }),
      step(2, 'activity', 'sendHello', { delivered_seq: 2 }),
    ]);
    expect(replay.newSteps.map((s) => [s.seq, s.name])).toEqual([[3, 'sendWelcome']]);
  });

  it('replays the old branch over a history recorded before the patch, taking no position', async () => {
    const old = await turn(v2, [
      step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 }),
      step(1, 'activity', 'sendWelcome', { output: 'w', delivered_seq: 2 }),
    ]);
    expect(old.outcome).toEqual({ kind: 'completed', output: ['u', 'w'] });
    expect(old.newSteps).toEqual([]);
  });

  it('retires a patch: a recorded one is taken, none is recorded anew', async () => {
    const retired = workflow('retired', async (ctx) => {
      const a = await ctx.run(createUser, { n: 1 });
      ctx.deprecatePatch('hello');
      await ctx.run(sendHello, { n: 1 });
      return [a, await ctx.run(sendWelcome, { n: 1 })];
    });
    const recorded = await turn(retired, [
      step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 }),
      step(1, 'value', 'patch:hello', { output: true }),
      step(2, 'activity', 'sendHello', { delivered_seq: 2 }),
    ]);
    expect(recorded.newSteps.map((s) => [s.seq, s.name])).toEqual([[3, 'sendWelcome']]);
    const fresh = await turn(retired, [step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 })]);
    expect(fresh.newSteps.map((s) => [s.seq, s.name])).toEqual([[1, 'sendHello']]);
  });

  it('refuses a change id that is not a name, at the call', async () => {
    const bad = workflow('bad-patch', (ctx) => Promise.resolve(ctx.patched('no spaces')));
    expect(failure(await turn(bad, [])).message).toMatch(/ctx\.patched in workflow bad-patch.*changeId/s);
  });
});
