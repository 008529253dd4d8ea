/** Continued turns of a kept workflow instance (replay.ts `continueTurn`) give what a full replay gives. */
import { describe, expect, it } from 'vitest';
import { ActivityFailure, CancelledFailure, type SerializedFailure } from '@palisade/sdk';
import type { HistoryStepRow } from './contract.js';
import { startTurn } from './run-turn.js';
import { plainTurnHost } from './fixtures/plain-host.js';
import { START_MS, StoredRun, completeAll, driveBothWays } from './fixtures/stored-run.js';
import { act, workflow } from './fixtures/turns.js';

const work = act('work');
const fast = act('fast');
const slow = act('slow');
const compensate = act('compensate');
const declined: SerializedFailure = { type: 'Declined', message: 'card declined', nonRetryable: true };

describe('a continued turn gives what a full replay over the same history gives', () => {
  it('runs a sequential workflow to its end, one step per turn', async () => {
    const sequential = workflow('sequential', async (ctx) => {
      const outputs: unknown[] = [];
      for (let i = 0; i < 12; i++) outputs.push(await ctx.run(work, { n: i }));
      return outputs;
    });
    const { results } = await driveBothWays(sequential, completeAll);
    expect(results).toHaveLength(13);
    expect(results.at(-1)?.outcome).toEqual({
      kind: 'completed',
      output: Array.from({ length: 12 }, (_, i) => `work:${i}`),
    });
    expect(results.slice(1).map((r) => r.deliveries[0]?.deliveredSeq)).toEqual(
      Array.from({ length: 12 }, (_, i) => i + 1),
    );
  });

  it('delivers parallel outcomes that arrive one per turn, last position first', async () => {
    const fanOut = workflow('fan-out', async (ctx) => {
      const all = await Promise.all([0, 1, 2, 3].map((n) => ctx.run(work, { n })));
      const next = await ctx.run(compensate, { n: 9 });
      return [...all, next];
    });
    const { results } = await driveBothWays(fanOut, (run) => {
      const last = run.pending().at(-1);
      if (last) run.complete(last, `work:${last.seq}`);
    });
    expect(results.at(-1)?.outcome).toEqual({
      kind: 'completed',
      output: ['work:0', 'work:1', 'work:2', 'work:3', 'work:4'],
    });
    // Scheduled after the code had seen all four outcomes.
    expect(results.flatMap((r) => r.newSteps).find((s) => s.name === 'compensate')?.afterDeliveredSeq).toBe(
      4,
    );
  });

  it('keeps the winner of a race that two outcomes of one turn decide by their finish times', async () => {
    const racer = workflow('racer', async (ctx) => {
      const winner = await Promise.race([
        ctx.run(slow, { n: 1 }).then(() => 'slow'),
        ctx.run(fast, { n: 2 }).then(() => 'fast'),
      ]);
      const after = await ctx.run(compensate, { n: 3 });
      return { winner, after };
    });
    const { results } = await driveBothWays(racer, (run, turn) => {
      if (turn !== 2) return completeAll(run);
      const [slowStep, fastStep] = run.pending() as [HistoryStepRow, HistoryStepRow];
      run.complete(slowStep, 'S', run.nowMs + 20);
      run.complete(fastStep, 'F', run.nowMs + 10);
      run.nowMs += 30;
    });
    expect(results.at(-1)?.outcome).toEqual({
      kind: 'completed',
      output: { winner: 'fast', after: 'compensate:2' },
    });
  });

  it('lets the loser of a race arrive in a later turn without changing what the code saw', async () => {
    const racer = workflow('racer-late', async (ctx) => {
      const loser = ctx.run(slow, { n: 1 });
      const winner = await Promise.race([
        loser.then(() => 'slow'),
        ctx.run(fast, { n: 2 }).then(() => 'fast'),
      ]);
      await ctx.sleep('1m');
      return { winner, late: await loser };
    });
    const { results } = await driveBothWays(racer, (run, turn) => {
      if (turn === 2) run.complete(run.pending()[1] as HistoryStepRow, 'F');
      if (turn === 3) run.complete(run.pending()[0] as HistoryStepRow, 'S');
      if (turn >= 3) run.nowMs += 61_000;
    });
    expect(results.at(-1)?.outcome).toEqual({ kind: 'completed', output: { winner: 'fast', late: 'S' } });
  });

  it('fires timers and records ctx.now() the same way', async () => {
    const napper = workflow('napper', async (ctx) => {
      const before = ctx.now().getTime();
      await ctx.sleep('5m');
      await ctx.sleepUntil(new Date(START_MS + 3_600_000));
      await Promise.all([ctx.sleep('1s'), ctx.run(work, { n: 1 })]);
      return { before, after: ctx.now().getTime() };
    });
    const { results } = await driveBothWays(napper, (run, turn) => {
      // Some turns wake before anything is due (a spurious wake-up): nothing delivered, nothing new.
      run.nowMs += turn % 2 === 0 ? 1 : 1_800_000;
      completeAll(run);
    });
    const last = results.at(-1)?.outcome;
    expect(last?.kind).toBe('completed');
    expect(results.some((r) => r.deliveries.length === 0 && r.newSteps.length === 0)).toBe(true);
    expect(results.flatMap((r) => r.deliveries).filter((d) => d.firesTimer)).toHaveLength(3);
  });

  it('hands a failure to the code, which catches it and compensates', async () => {
    const forgiving = workflow('forgiving', async (ctx) => {
      try {
        await ctx.run(work, { n: 1 });
        return 'charged';
      } catch (error) {
        if (!(error instanceof ActivityFailure)) throw error;
        await ctx.run(compensate, { n: 2 });
        return `compensated ${error.failure.type}`;
      }
    });
    const { results } = await driveBothWays(forgiving, (run) => {
      for (const h of run.pending()) {
        if (h.name === 'work') run.fail(h, declined);
        else run.complete(h, 'ok');
      }
    });
    expect(results.at(-1)?.outcome).toEqual({ kind: 'completed', output: 'compensated Declined' });
  });

  it('fails the run the same way when the code does not catch', async () => {
    const strict = workflow('strict', async (ctx) => {
      await ctx.run(work, { n: 1 });
      return ctx.run(work, { n: 2 });
    });
    const { results } = await driveBothWays(strict, (run, turn) => {
      for (const h of run.pending()) {
        if (turn === 3) run.fail(h, declined);
        else run.complete(h, 'ok');
      }
    });
    const last = results.at(-1)?.outcome;
    expect(last?.kind === 'failed' && last.error.code).toBe('ACTIVITY_FAILURE');
  });

  it('hands a cancel that ended the steps the code awaits, then runs its compensation', async () => {
    const careful = workflow('careful', async (ctx) => {
      await ctx.run(work, { n: 1 });
      try {
        await Promise.all([ctx.run(slow, { n: 2 }), ctx.sleep('1h')]);
        return 'finished';
      } catch (error) {
        if (!(error instanceof CancelledFailure)) throw error;
        await ctx.run(compensate, { n: 9 });
        throw error;
      }
    });
    const { results } = await driveBothWays(careful, (run, turn) => {
      if (turn === 3) run.cancel();
      else completeAll(run);
    });
    expect(results.at(-1)?.outcome.kind).toBe('cancelled');
    expect(results.flatMap((r) => r.newSteps).map((s) => s.name)).toEqual([
      'work',
      'slow',
      'sleep',
      'compensate',
    ]);
  });

  it('cancels the steps a turn schedules when the cancel came with no live step to end', async () => {
    const careful = workflow('careful-late', async (ctx) => {
      await ctx.run(work, { n: 1 });
      try {
        await ctx.run(slow, { n: 2 });
        return 'finished';
      } catch (error) {
        if (!(error instanceof CancelledFailure)) throw error;
        await ctx.run(compensate, { n: 9 });
        throw error;
      }
    });
    const { results } = await driveBothWays(careful, (run, turn) => {
      completeAll(run);
      if (turn === 2) run.cancelRequested = true; // after `work` ended: nothing live to cancel
    });
    // slow is recorded cancelled by the turn that scheduled it, delivered at once; compensate runs normally.
    expect(results[1]?.newSteps).toMatchObject([
      { seq: 1, name: 'slow', cancelled: true, deliveredSeq: 2 },
      { seq: 2, name: 'compensate', afterDeliveredSeq: 2 },
    ]);
    expect(results.at(-1)?.outcome.kind).toBe('cancelled');
  });
});

describe('an instance that cannot be continued', () => {
  it('is not continuable once its code ran between turns (a promise that is not a durable call settled)', async () => {
    let release!: () => void;
    const outside = new Promise<void>((resolve) => (release = resolve));
    const sneaky = workflow('sneaky', async (ctx) => {
      await Promise.race([ctx.run(work, { n: 1 }), outside]);
      return ctx.run(work, { n: 2 });
    });
    const { result, instance } = await startTurn({
      ...new StoredRun().params(1),
      host: plainTurnHost,
      workflow: sneaky,
      input: null,
      history: [],
    });
    expect(result.outcome).toEqual({ kind: 'blocked' });
    expect(instance.continuable).toBe(true);
    release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(instance.continuable).toBe(false);
    expect(await instance.continueTurn({ ...new StoredRun().params(2), fresh: [] })).toBeUndefined();
  });

  it('is not continuable after a turn that ended the run', async () => {
    const quick = workflow('quick', () => Promise.resolve('done'));
    const { result, instance } = await startTurn({
      ...new StoredRun().params(1),
      host: plainTurnHost,
      workflow: quick,
      input: null,
      history: [],
    });
    expect(result.outcome).toEqual({ kind: 'completed', output: 'done' });
    expect(instance.continuable).toBe(false);
  });
});
