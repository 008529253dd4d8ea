/**
 * Prefetch (issue 12): a worker whose attempts run short claims ahead of its free slots, so one claim statement
 * serves more attempts than it has slots, and starts those grants as slots free. A prefetched grant is an
 * ordinary grant: it is not heartbeated while it waits, one that is no longer fresh is released unstarted and
 * uncharged (I12) without waiting for a slot, and `stop()` releases those still waiting. A worker whose attempts run long claims only
 * for its free slots.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import type { Worker } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, gate, makeFirstGrantsStale, stepOf, workerEvent, type Gate } from './helpers.js';

/** Jobs of this test: `hold` waits for the test's gate, `runMs` runs that long; the rest return at once. */
function jobs(holds: Map<number, Gate>) {
  return defineActivity({
    name: 'job',
    input: z.object({ k: z.number(), runMs: z.number().optional(), stale: z.boolean().optional() }),
    output: z.object({ k: z.number() }),
    async run({ k, runMs }) {
      const held = holds.get(k);
      if (held) await held.promise;
      if (runMs) await new Promise((resolve) => setTimeout(resolve, runMs));
      return { k };
    },
  });
}

/** How each grant of `worker` started, in order (`attempt:claimed`'s `grant`), keyed by run. */
function grantsOf(worker: Worker): { runId: string; grant: string }[] {
  const grants: { runId: string; grant: string }[] = [];
  worker.events.on('attempt:claimed', ({ attempt, grant }) => grants.push({ runId: attempt.runId, grant }));
  return grants;
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`prefetch on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('claims ahead of its free slots while attempts run short, and runs every job once', async () => {
      const engine = await target.engine();
      const job = jobs(new Map());
      const handles = [];
      for (let k = 0; k < 40; k++) handles.push(await engine.client.enqueue(job, { k }));
      const worker = engine.worker({ activities: [job], concurrency: 2 });
      const grants = grantsOf(worker);
      await worker.start();
      for (const [k, h] of handles.entries()) expect(await h.result({ timeoutMs: 20_000 })).toEqual({ k });
      await worker.stop();
      // Some grants waited for a slot: their claim took more steps than the worker had slots free.
      expect(grants.filter((g) => g.grant === 'prefetched').length).toBeGreaterThan(0);
      expect(grants).toHaveLength(40);
      for (const h of handles) {
        expect((await attemptsOf(engine, h.runId)).map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
          [1, 1, 'completed'],
        ]);
      }
    });

    it('claims only for its free slots with prefetch 0, or while its attempts run long', async () => {
      const engine = await target.engine();
      const job = jobs(new Map());
      const off = engine.worker({ activities: [job], concurrency: 2, prefetch: 0 });
      const offGrants = grantsOf(off);
      await off.start();
      const quick = [];
      for (let k = 0; k < 20; k++) quick.push(await engine.client.enqueue(job, { k }));
      for (const h of quick) await h.result({ timeoutMs: 20_000 });
      await off.stop();
      expect(offGrants.map((g) => g.grant)).toEqual(Array(20).fill('claimed'));

      // Each attempt runs past the 200 ms a prefetched grant may wait: none is claimed ahead.
      const slow = [];
      for (let k = 0; k < 4; k++) slow.push(await engine.client.enqueue(job, { k, runMs: 250 }));
      const on = engine.worker({ activities: [job], concurrency: 1 });
      const onGrants = grantsOf(on);
      await on.start();
      for (const h of slow) await h.result({ timeoutMs: 20_000 });
      await on.stop();
      expect(onGrants.map((g) => g.grant)).toEqual(Array(4).fill('claimed'));
    });

    it('releases a prefetched grant once it is no longer fresh, while every slot stays busy, uncharged', async () => {
      const engine = await target.engine();
      // The claim of `late` (with `blocker`) reports 16.5 s of its 30 s lease left: fresh for 1.5 s, then stale
      // (below the default half) while the blocker holds the one slot.
      await makeFirstGrantsStale(engine, 13_500, { onlyFlagged: true });
      const blocked = gate();
      const job = jobs(new Map([[1, blocked]]));
      // Claimed in priority order: the short job alone (the worker has run nothing yet), then blocker and late
      // in one claim, late prefetched behind blocker.
      const first = await engine.client.enqueue(job, { k: 0 }, { priority: 10 });
      const blocker = await engine.client.enqueue(job, { k: 1 }, { priority: 5 });
      const late = await engine.client.enqueue(job, { k: 2, stale: true }, { priority: 0 });
      const worker = engine.worker({ activities: [job], concurrency: 1, prefetch: 1 });
      const grants = grantsOf(worker);
      const released = workerEvent(worker, 'attempt:released', (e) => e.attempt.runId === late.runId);
      const blockerStarted = workerEvent(worker, 'attempt:started', (e) => e.attempt.runId === blocker.runId);
      await worker.start();
      await first.result({ timeoutMs: 20_000 });
      await blockerStarted;
      // Released while the blocker still holds the slot: it does not wait for a slot, or for its lease to run out.
      expect((await released).why).toBe('stale-grant');
      blocked.open();
      expect(await late.result({ timeoutMs: 20_000 })).toEqual({ k: 2 });
      expect(await blocker.result({ timeoutMs: 20_000 })).toEqual({ k: 1 });
      await worker.stop();
      expect(grants.filter((g) => g.runId === late.runId).map((g) => g.grant)).toEqual([
        'prefetched',
        'claimed',
      ]);
      // The stale grant never ran and cost no attempt: the next claim ran it as attempt 1 of epoch 2.
      expect((await attemptsOf(engine, late.runId)).map((a) => [a.attempt, a.epoch, a.outcome])).toEqual([
        [1, 1, 'released'],
        [1, 2, 'completed'],
      ]);
    });

    it('stop() releases the grants still waiting for a slot', async () => {
      const engine = await target.engine();
      const blocked = gate();
      const job = jobs(new Map([[1, blocked]]));
      const first = await engine.client.enqueue(job, { k: 0 }, { priority: 10 });
      const blocker = await engine.client.enqueue(job, { k: 1 }, { priority: 5 });
      const waiting = await engine.client.enqueue(job, { k: 2 }, { priority: 0 });
      const worker = engine.worker({ activities: [job], concurrency: 1, prefetch: 1 });
      const released = workerEvent(worker, 'attempt:released', (e) => e.attempt.runId === waiting.runId);
      const blockerStarted = workerEvent(worker, 'attempt:started', (e) => e.attempt.runId === blocker.runId);
      await worker.start();
      await first.result({ timeoutMs: 20_000 });
      await blockerStarted;
      const stopped = worker.stop({ graceMs: 20_000 });
      expect((await released).why).toBe('shutdown');
      blocked.open();
      await stopped;
      expect(await blocker.result({ timeoutMs: 20_000 })).toEqual({ k: 1 });
      // Released unstarted and uncharged: scheduled again, for any worker.
      expect(await stepOf(engine, waiting.runId)).toMatchObject({
        status: 'scheduled',
        attempt: 0,
        epoch: 1,
      });
      expect((await attemptsOf(engine, waiting.runId)).map((a) => a.outcome)).toEqual(['released']);
    });
  });
}
