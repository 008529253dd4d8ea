import { describe, expect, it } from 'vitest';
import type { RunHistoryNews } from '../queries/claim-turns.js';
import { InstanceCache, canContinue, type KeptInstance } from './instance-cache.js';
import type { WorkflowInstance } from '../turn/contract.js';

function kept(turnEpoch: number, over: Partial<WorkflowInstance> = {}): KeptInstance {
  const instance: WorkflowInstance = {
    expected: { liveSteps: 5, maxDeliveredSeq: 3 },
    continuable: true,
    awaits: () => true,
    continueTurn: () => Promise.resolve(undefined),
    ...over,
  };
  return {
    instance,
    turnEpoch,
    turnAttempt: turnEpoch,
    wakeCount: 1,
    workflowName: 'wf',
    queue: 'default',
    priority: 0,
    dbNowMs: 0,
    atMonotonicMs: 0,
  };
}

const news = (over: Partial<RunHistoryNews> = {}): RunHistoryNews => ({
  live_steps: 5,
  max_delivered_seq: 3,
  fresh: [],
  ...over,
});

describe('canContinue', () => {
  it('continues the turn right after the kept one over the history the instance expects', () => {
    expect(canContinue(kept(7), { turnEpoch: 8, news: news() })).toBe(true);
  });

  it('replays in full when any other turn was claimed in between, or the epoch went back', () => {
    expect(canContinue(kept(7), { turnEpoch: 9, news: news() })).toBe(false);
    expect(canContinue(kept(7), { turnEpoch: 7, news: news() })).toBe(false);
  });

  it('replays in full when the claim did not read the news (another worker ran the last turn, or a race)', () => {
    expect(canContinue(kept(7), { turnEpoch: 8, news: null })).toBe(false);
  });

  it('replays in full when steps were retired or added, or deliveries withdrawn (a retry)', () => {
    expect(canContinue(kept(7), { turnEpoch: 8, news: news({ live_steps: 4 }) })).toBe(false);
    expect(canContinue(kept(7), { turnEpoch: 8, news: news({ live_steps: 6 }) })).toBe(false);
    expect(canContinue(kept(7), { turnEpoch: 8, news: news({ max_delivered_seq: 2 }) })).toBe(false);
  });

  it('replays in full when the instance is not continuable', () => {
    expect(canContinue(kept(7, { continuable: false }), { turnEpoch: 8, news: news() })).toBe(false);
  });
});

describe('InstanceCache', () => {
  it('hands an entry out once: taking it removes it', () => {
    const cache = new InstanceCache(10);
    const entry = kept(1);
    cache.put('a', entry);
    expect(cache.take('a')).toBe(entry);
    expect(cache.take('a')).toBeUndefined();
    expect(cache.size).toBe(0);
  });

  it('drops the least recently kept run beyond its capacity', () => {
    const cache = new InstanceCache(2);
    cache.put('a', kept(1));
    cache.put('b', kept(1));
    cache.put('a', kept(2)); // a is now the most recent
    cache.put('c', kept(1));
    expect(cache.size).toBe(2);
    expect(cache.take('b')).toBeUndefined();
    expect(cache.take('a')?.turnEpoch).toBe(2);
    expect(cache.take('c')?.turnEpoch).toBe(1);
  });

  it('keeps nothing with capacity 0', () => {
    const cache = new InstanceCache(0);
    cache.put('a', kept(1));
    expect(cache.size).toBe(0);
    expect(cache.take('a')).toBeUndefined();
  });

  it('forgets everything on clear()', () => {
    const cache = new InstanceCache(10);
    cache.put('a', kept(1));
    cache.put('b', kept(1));
    cache.clear();
    expect(cache.size).toBe(0);
  });
});

describe('InstanceCache.takeWhenBack', () => {
  it('takes at once when the run’s instance is not out, and answers undefined when none is kept', async () => {
    const cache = new InstanceCache(4);
    expect(await cache.takeWhenBack('r1', 60_000)).toBeUndefined();
    const entry = kept(1);
    cache.put('r1', entry);
    expect(await cache.takeWhenBack('r1', 60_000)).toBe(entry);
    expect(cache.returned('r1')).toBeDefined(); // out now, until put back or released
  });

  it('waits for the turn holding the instance to put it back, or to drop it', async () => {
    const cache = new InstanceCache(4);
    cache.put('r1', kept(1));
    cache.take('r1');
    const waiting = cache.takeWhenBack('r1', 60_000);
    cache.put('r1', kept(2));
    expect((await waiting)?.turnEpoch).toBe(2);
    const again = cache.takeWhenBack('r1', 60_000);
    cache.release('r1');
    expect(await again).toBeUndefined();
    expect(cache.returned('r1')).toBeUndefined();
  });

  it('hands the instance to one waiter at a time: the second waits until the first puts it back', async () => {
    // Two completions of one run waiting together (parallel steps ending at once): once the holder puts the
    // instance back, one takes it; the other must wait for that one, not find it out and go on without it.
    const cache = new InstanceCache(4);
    cache.put('r1', kept(1));
    cache.take('r1');
    const first = cache.takeWhenBack('r1', 60_000);
    const second = cache.takeWhenBack('r1', 60_000);
    cache.put('r1', kept(2));
    expect((await first)?.turnEpoch).toBe(2);
    cache.put('r1', kept(3));
    expect((await second)?.turnEpoch).toBe(3);
  });

  it('leaves a kept instance in place when the caller does not want it', async () => {
    const cache = new InstanceCache(4);
    cache.put('r1', kept(1));
    expect(await cache.takeWhenBack('r1', 60_000, { wanted: (k) => k.turnEpoch > 1 })).toBeUndefined();
    expect(cache.returned('r1')).toBeUndefined();
    expect(cache.take('r1')?.turnEpoch).toBe(1);
  });

  it('gives up on a holder that never comes back, after at most maxWaitMs', async () => {
    const cache = new InstanceCache(4);
    cache.put('r1', kept(1));
    cache.take('r1');
    expect(await cache.takeWhenBack('r1', 5)).toBeUndefined();
    expect(cache.returned('r1')).toBeDefined(); // still out: the caller goes on without it (a full replay)
  });

  it('stops waiting when the caller no longer wants the instance (the worker is stopping)', async () => {
    const cache = new InstanceCache(4);
    cache.put('r1', kept(1));
    cache.take('r1');
    const waiting = cache.takeWhenBack('r1', 60_000, { stillWanted: () => false });
    cache.put('r1', kept(2));
    expect(await waiting).toBeUndefined();
    expect(cache.take('r1')?.turnEpoch).toBe(2);
  });
});
