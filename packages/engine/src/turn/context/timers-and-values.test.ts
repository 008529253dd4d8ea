/** `ctx.sleep`, `ctx.sleepUntil` (timers.ts) and the recorded values `ctx.now/random/uuid` (workflow-context.ts). */
import { describe, expect, it } from 'vitest';
import { failure, NOW_MS, step, turn, workflow } from '../fixtures/turns.js';

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
