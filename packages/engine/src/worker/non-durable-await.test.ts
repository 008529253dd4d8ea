/**
 * The worker's turn host for Node (non-durable-await.ts) under real turns: workflow code that starts a timer or
 * I/O fails the run with NON_DURABLE_AWAIT, code outside the workflow is never blamed, and `Math.random`, `Date.now`
 * and `new Date()` in workflow code are the run's own (seeded, the workflow's clock) only while its turn runs.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { HistoryStepRow, TurnInput, TurnResult } from '../turn/contract.js';
import { completeAll, driveBothWays } from '../turn/fixtures/stored-run.js';
import { NOW_MS, act, failure, step, turn, workflow, type Workflow } from '../turn/fixtures/turns.js';
import { nodeTurnHost } from './non-durable-await.js';

const createUser = act('createUser');
const fast = act('fast');
const work = act('work');
/** The process's own `Math.random` and `Date`, as loaded. */
const processRandom = Math.random;
const ProcessDate = Date;

/** One full-replay turn on the worker's host (fixtures/turns.ts `turn`). */
function nodeTurn(
  wf: Workflow,
  history: HistoryStepRow[],
  over: Partial<TurnInput> = {},
): Promise<TurnResult> {
  return turn(wf, history, { host: nodeTurnHost, ...over });
}

describe('the Node turn host: deterministic Math.random and Date in workflow code', () => {
  it('gives Math.random() in workflow code numbers seeded from the run id: the same on every replay', async () => {
    const draws: number[][] = [];
    const coin = workflow('coin', async (ctx) => {
      draws.push([Math.random(), Math.random()]);
      await ctx.sleep('10s');
    });
    await nodeTurn(coin, []);
    await nodeTurn(coin, []);
    await nodeTurn(coin, [], {
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
    const result = await nodeTurn(timed, history, { startedMs: startedMs + 0.7, nowMs: NOW_MS + 0.9 });
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
});

describe('the Node turn host: non-durable awaits', () => {
  it('fails with NON_DURABLE_AWAIT naming the workflow when workflow code starts a timer', async () => {
    const napper = workflow('timer-napper', async (ctx) => {
      await ctx.run(fast, { n: 1 });
      await new Promise((resolve) => setTimeout(resolve, 1));
      return 'unreachable in a durable world';
    });
    const result = await nodeTurn(napper, [step(0, 'activity', 'fast')]);
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
      const result = await nodeTurn(fetcher, []);
      const error = failure(result);
      expect(error.code).toBe('NON_DURABLE_AWAIT');
      expect(error.message).toContain('workflow fetcher started a TCPWRAP');
      expect(result.newSteps).toEqual([]);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('does not blame a well-behaved turn for timers started outside workflow code at the same time', async () => {
    const good = workflow('good', async (ctx) => ctx.run(fast, { n: 1 }));
    const timers = Array.from({ length: 5 }, () => new Promise((resolve) => setTimeout(resolve, 0)));
    const [result] = await Promise.all([
      nodeTurn(good, [step(0, 'activity', 'fast', { output: 7 })]),
      ...timers,
    ]);
    expect(result.outcome).toEqual({ kind: 'completed', output: 7 });
  });
});

describe('the Node turn host in continued turns', () => {
  it('detects a timer started in workflow code during a continued turn', async () => {
    const napper = workflow('timer-napper', async (ctx) => {
      await ctx.run(work, { n: 1 });
      await ctx.run(work, { n: 2 });
      await new Promise((resolve) => setTimeout(resolve, 1));
      return 'unreachable';
    });
    const { results } = await driveBothWays(napper, completeAll, 50, nodeTurnHost);
    const last = results.at(-1)?.outcome;
    expect(last?.kind === 'failed' && last.error.code).toBe('NON_DURABLE_AWAIT');
    expect(last?.kind === 'failed' && last.error.message).toContain('Timeout');
  });

  it('gives Math.random() and Date.now() in a continued turn what a full replay gives, and restores them after', async () => {
    const coin = workflow('coin', async (ctx) => {
      const before = [Math.random(), Date.now()];
      await ctx.run(work, { n: 1 });
      return [...before, Math.random(), Date.now()];
    });
    // driveBothWays compares each continued turn's result with a full replay's.
    const { results } = await driveBothWays(coin, completeAll, 50, nodeTurnHost);
    const last = results.at(-1)?.outcome;
    expect(last?.kind).toBe('completed');
    expect(Math.random).toBe(processRandom);
  });
});
