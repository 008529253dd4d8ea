import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { PeriodicTask } from './periodic-task.js';

/** A task whose runs are the given function. */
class TestTask extends PeriodicTask {
  constructor(private readonly run: (keepGoing: () => boolean) => Promise<number>) {
    super();
  }

  protected runOnce(keepGoing: () => boolean): Promise<number> {
    return this.run(keepGoing);
  }
}

describe('PeriodicTask', () => {
  beforeEach(() => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] }));
  afterEach(() => vi.useRealTimers());

  it('runs at start, then again after each wait the run returns', async () => {
    const waits = [100, 30, 500];
    const ranAt: number[] = [];
    let now = 0;
    const task = new TestTask(() => {
      ranAt.push(now);
      return Promise.resolve(waits[ranAt.length - 1] ?? 1_000);
    });
    task.start();
    for (const step of [0, 99, 1, 29, 1, 499, 1]) {
      now += step;
      await vi.advanceTimersByTimeAsync(step);
    }
    expect(ranAt).toEqual([0, 100, 130, 630]);
    await task.stop();
  });

  it('times the next run from the end of the previous one: never two at once', async () => {
    let inFlight = 0;
    let most = 0;
    let runs = 0;
    const task = new TestTask(async () => {
      runs++;
      inFlight++;
      most = Math.max(most, inFlight);
      await new Promise((resolve) => setTimeout(resolve, 250)); // a run longer than its wait
      inFlight--;
      return 10;
    });
    task.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect(most).toBe(1);
    expect(runs).toBe(4); // 0, 260, 520, 780: each 250 ms run followed by its 10 ms wait
    const stopping = task.stop();
    await vi.advanceTimersByTimeAsync(250);
    await stopping;
  });

  it('stop waits for the run under way, tells it to stop, and leaves no timer behind', async () => {
    let release!: () => void;
    let runs = 0;
    let seen: (() => boolean) | undefined;
    const task = new TestTask((keepGoing) => {
      runs++;
      seen = keepGoing;
      return new Promise<number>((resolve) => (release = () => resolve(10)));
    });
    task.start();
    expect(seen?.()).toBe(true);
    let stopped = false;
    const stopping = task.stop().then(() => (stopped = true));
    expect(seen?.()).toBe(false);
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    release();
    await stopping;
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(runs).toBe(1);
  });

  it('stop between runs clears the pending timer', async () => {
    let runs = 0;
    const task = new TestTask(() => {
      runs++;
      return Promise.resolve(1_000);
    });
    task.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(vi.getTimerCount()).toBe(1);
    await task.stop();
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(runs).toBe(1);
  });
});
