/**
 * Replay without event-loop turns (issue 12, item 6): a turn delivers each recorded outcome and lets the code run
 * until it blocks again by draining the microtask queue of the code's work (settleMicrotasks), not by waiting for
 * an event-loop turn per outcome. The drain must leave the code's jobs in the order an event-loop turn gives, or a
 * replay would see its durable calls in another order than the run that recorded them.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineWorkflow, type WorkflowContext } from '@palisade/sdk';
import type { HistoryStepRow, TurnResult } from '../turn/contract.js';
import { runTurn } from '../turn/run-turn.js';
import { nodeTurnHost, settleMicrotasks, trackNonDurable } from './non-durable-await.js';

const macrotask = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A seeded generator (LCG), so every program is the same on every run. */
function generator(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

/**
 * Runs one generated program of awaits (sequences, Promise.all and race, await chains, thenables, async functions
 * returning promises, then-chains, nested branches) against deliveries made in a seeded order, draining with
 * `drain` after the start and after each delivery; returns the log of calls, deliveries and continuations in the
 * order they happened.
 */
async function runProgram(seed: number, drain: () => Promise<void>): Promise<string> {
  const random = generator(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const log: string[] = [];
  const pending = new Map<number, (value: number) => void>();
  let position = 0;
  const call = (tag: string): Promise<number> => {
    const p = position++;
    log.push(`call${p}:${tag}`);
    return new Promise((resolve) => pending.set(p, resolve));
  };
  const hops = async (n: number) => {
    for (let i = 0; i < n; i++) await Promise.resolve();
  };
  const thenable = (value: number) => ({
    then(onFulfilled: (v: number) => void) {
      onFulfilled(value);
    },
  });
  async function branch(depth: number, tag: string): Promise<void> {
    const n = 1 + Math.floor(random() * 3);
    switch (pick(['seq', 'all', 'race', 'hops', 'thenable', 'async-return', 'then'] as const)) {
      case 'seq':
        for (let i = 0; i < n; i++) {
          await call(`${tag}s${i}`);
          log.push(`${tag}s${i}:done`);
        }
        break;
      case 'all':
        await Promise.all(
          Array.from({ length: n }, (_, i) =>
            call(`${tag}a${i}`).then(() => void log.push(`${tag}a${i}:then`)),
          ),
        );
        break;
      case 'race':
        log.push(
          `${tag}race:${await Promise.race(Array.from({ length: n }, (_, i) => call(`${tag}r${i}`).then(() => i)))}`,
        );
        break;
      case 'hops':
        await hops(1 + Math.floor(random() * 6));
        await call(`${tag}h`);
        break;
      case 'thenable':
        await thenable(1);
        await call(`${tag}t`);
        await (async () => thenable(2))();
        break;
      case 'async-return': {
        const f = async () => call(`${tag}ar`);
        await f();
        log.push(`${tag}ar:done`);
        break;
      }
      case 'then':
        await call(`${tag}x`)
          .then((v) => Promise.resolve(v))
          .then(async () => {
            await hops(2);
            log.push(`${tag}x:then`);
          });
        break;
    }
    if (depth > 0 && random() < 0.6)
      await Promise.all([branch(depth - 1, `${tag}L`), branch(depth - 1, `${tag}R`)]);
  }

  const tracking = trackNonDurable({ reportNonDurable: () => undefined }, () => undefined);
  try {
    let done = false;
    void Promise.resolve()
      .then(() => branch(3, 'b'))
      .then(() => {
        done = true;
        log.push('end');
      });
    await drain();
    for (let guard = 0; !done && guard < 500; guard++) {
      const keys = [...pending.keys()].sort((a, b) => a - b);
      if (keys.length === 0) {
        log.push('blocked');
        break;
      }
      const k = keys[Math.floor(random() * Math.min(keys.length, 2))] as number;
      const resolve = pending.get(k) as (value: number) => void;
      pending.delete(k);
      log.push(`deliver${k}`);
      resolve(k);
      await drain();
    }
  } finally {
    tracking.end();
  }
  return log.join(' ');
}

const act = defineActivity({
  name: 'act',
  input: z.object({ i: z.number() }),
  output: z.number(),
  run: () => Promise.resolve(0),
});
const NOW_MS = Date.parse('2030-01-01T00:00:00Z');

function history(n: number): HistoryStepRow[] {
  return Array.from({ length: n }, (_, seq) => ({
    id: `00000000-0000-4000-8000-${String(seq).padStart(12, '0')}`,
    seq,
    kind: 'activity' as const,
    name: 'act',
    status: 'completed',
    output: seq,
    error: null,
    delivered_seq: seq + 1,
    due_ms: null,
    finished_ms: NOW_MS - 10_000 + seq,
  }));
}

function replay(
  run: (ctx: WorkflowContext) => Promise<unknown>,
  steps: HistoryStepRow[],
): Promise<TurnResult> {
  const wf = defineWorkflow({
    name: 'wf',
    input: z.unknown(),
    output: z.unknown(),
    run: (_input, ctx) => run(ctx),
  });
  return runTurn({
    host: nodeTurnHost,
    workflow: wf,
    info: { runId: '11111111-1111-4111-8111-111111111111', workflowName: 'wf', turnAttempt: 1, queue: 'q' },
    input: null,
    priority: 0,
    history: steps,
    nowMs: NOW_MS,
    cancelRequested: false,
  });
}

describe('draining the microtask queue between deliveries', () => {
  it('runs the code’s jobs in the order an event-loop turn per delivery gives, on 500 generated programs', async () => {
    // The comparison can fail: a drain of a fixed number of hops differs on most of these programs.
    const fixedHops = async () => {
      for (let i = 0; i < 3; i++) await Promise.resolve();
    };
    let differsWithFixedHops = 0;
    for (let seed = 1; seed <= 500; seed++) {
      const expected = await runProgram(seed, macrotask);
      expect(await runProgram(seed, settleMicrotasks), `program ${seed}`).toBe(expected);
      if ((await runProgram(seed, fixedHops)) !== expected) differsWithFixedHops++;
    }
    expect(differsWithFixedHops).toBeGreaterThan(100);
  });

  it('waits for an event-loop turn when no turn is tracked (nothing counts reactions then)', async () => {
    let loopTurned = false;
    setImmediate(() => (loopTurned = true));
    await settleMicrotasks();
    expect(loopTurned).toBe(true);
  });

  it('lets turns drain at the same time: each sees its own order, and none waits for an event-loop turn', async () => {
    const alone = await Promise.all([11, 12, 13].map((seed) => runProgram(seed, macrotask)));
    let loopTurned = false;
    setImmediate(() => (loopTurned = true));
    const together = await Promise.all([11, 12, 13].map((seed) => runProgram(seed, settleMicrotasks)));
    // Each drain counts the others' hops as its own kind, not as code that ran (else they wait on each other
    // until a drain gives up and takes an event-loop turn).
    expect(loopTurned).toBe(false);
    expect(together).toEqual(alone);
  });

  /** Counts event-loop turns until stopped (an immediate that schedules the next). */
  function loopTurns(): { readonly count: number; stop(): void } {
    let count = 0;
    let timer = setImmediate(function tick() {
      count++;
      timer = setImmediate(tick);
    });
    return {
      get count() {
        return count;
      },
      stop: () => clearImmediate(timer),
    };
  }

  const sum = (n: number) => async (ctx: WorkflowContext) => {
    let total = 0;
    for (let i = 0; i < n; i++) total += await ctx.run(act, { i });
    return total;
  };

  it('replays 300 recorded outcomes in far fewer event-loop turns than outcomes (none, on an idle machine)', async () => {
    const turns = loopTurns();
    const result = await replay(sum(300), history(300));
    turns.stop();
    // One turn per outcome before; now one per 20 ms the replay holds the loop (a 300-outcome replay takes ~2 ms).
    expect(turns.count).toBeLessThan(30);
    expect(result.outcome).toEqual({ kind: 'completed', output: (299 * 300) / 2 });
  });

  it('lets the event loop turn once a replay has held it 20 ms, so the worker’s timers are not held up by it', async () => {
    const turns = loopTurns();
    // Code that holds the thread 25 ms after each of 3 outcomes (a stand-in for a long history): each drain after
    // it finds the slice used up and lets the loop turn, whatever the machine's speed.
    const result = await replay(async (ctx) => {
      let total = 0;
      for (let i = 0; i < 3; i++) {
        total += await ctx.run(act, { i });
        const until = performance.now() + 25;
        while (performance.now() < until);
      }
      return total;
    }, history(3));
    turns.stop();
    expect(turns.count).toBeGreaterThanOrEqual(3);
    expect(result.outcome).toEqual({ kind: 'completed', output: 3 });
  });

  it('falls back to an event-loop turn per delivery for code that queues work with process.nextTick', async () => {
    let loopTurned = false;
    setImmediate(() => (loopTurned = true));
    const order: string[] = [];
    const result = await replay(async (ctx) => {
      const a = ctx.run(act, { i: 0 }).then((v) => {
        process.nextTick(() => order.push(`tick after ${v}`));
        return v;
      });
      const b = ctx.run(act, { i: 1 }).then((v) => {
        order.push(`then ${v}`);
        return v;
      });
      return (await a) + (await b);
    }, history(2));
    expect(result.outcome).toEqual({ kind: 'completed', output: 1 });
    // As with an event-loop turn after each delivery: the tick queued by the first outcome's reaction runs
    // before the second outcome is delivered.
    expect(order).toEqual(['tick after 0', 'then 1']);
    expect(loopTurned).toBe(true);
  });
});
