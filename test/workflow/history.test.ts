/**
 * A workflow run's whole history as `describe()` and `watch()` show it: every event, every field, in order. Most
 * events are read off the rows the engine writes anyway (the `run_events` view, migrations 0008, 0010 and 0023:
 * `run:started`, an activity's `step:scheduled`, `attempt:claimed`, `step:completed`, `run:completed`); the
 * others are stored. Both kinds must interleave as they did when all were stored: at one instant (one statement),
 * the stored events of the statement first, then the steps it scheduled in position order, then the claims it
 * granted, then the run's end.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, defineActivity, defineSignal, defineWorkflow } from '@palisade/sdk';
import type { Engine, EventDescription } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { nextEvent, useEngineTarget } from '../support/engine.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker } from '../support/worker.js';
import { echoActivity } from '../fixtures/pure-activity.js';
import { attemptsOf, deferred, stepsOf, stepsReach, type StoredStep } from './workflow-rows.js';

const HOUR_MS = 3_600_000;
/** Every activity's lease: the worker's heartbeat (a third of it) never comes within a run of this test. */
const LEASE_MS = 60_000;

const go = defineSignal({ name: 'h-go', payload: z.string() });

/** Fails its first attempt (retryable), completes the second. */
const failOnce = defineActivity({
  name: 'h-fail-once',
  input: z.string(),
  output: z.string(),
  leaseMs: LEASE_MS,
  retry: { initialIntervalMs: 50, jitter: 0 },
  run: (s, ctx) =>
    ctx.info.attempt === 1
      ? Promise.reject(ApplicationFailure.retryable('not yet', 'NotYet'))
      : Promise.resolve(`${s}!`),
});

const echo = echoActivity('h-echo', z.string(), { leaseMs: LEASE_MS });

/** Its first attempt holds until `zombieGate` opens (a zombie once its lease was taken over); later ones return. */
let zombieGate = deferred();
let zombieHolding = deferred();
const zombie = defineActivity({
  name: 'h-zombie',
  input: z.string(),
  output: z.string(),
  leaseMs: LEASE_MS,
  retry: { initialIntervalMs: 100, jitter: 0 },
  async run(s, ctx) {
    if (ctx.info.attempt > 1) return `${s} (fresh)`;
    zombieHolding.resolve();
    await zombieGate.promise;
    return `${s} (late)`;
  },
});

const child = defineWorkflow({
  name: 'h-child',
  input: z.string(),
  output: z.string(),
  run: (s) => Promise.resolve(s.toUpperCase()),
});

const flow = defineWorkflow({
  name: 'h-flow',
  input: z.object({}),
  output: z.string(),
  async run(_input, ctx) {
    const a = await ctx.run(failOnce, 'a'); // seq 0: a retry
    const signalled = await ctx.waitForSignal(go); // seq 1: a signal
    // seq 2 (derived step:scheduled) and seq 3 (a stored timer:started), in one commit with the signal taken.
    const [echoed] = await Promise.all([ctx.run(echo, signalled), ctx.sleep(HOUR_MS)]);
    const shouted = await ctx.runChild(child, echoed); // seq 4: a child, started in the commit the timer fired in
    const z2 = await ctx.run(zombie, shouted); // seq 5: a stale write
    return [a, signalled, echoed, shouted, z2].join(',');
  },
});

/** What one expected event says; `undefined` in a field: compared as written below, not left out. */
interface Expected {
  readonly type: string;
  readonly seq: number | null;
  readonly id: RegExp;
  readonly attempt?: number | null;
  readonly epoch?: number | null;
  readonly token?: string | null;
  readonly workerId?: string | null;
  readonly data: unknown;
  readonly at?: number;
}

/** The step at position `seq` (its live row). */
function stepAt(steps: readonly StoredStep[], seq: number): StoredStep {
  const step = steps.find((s) => s.seq === seq);
  if (!step) throw new Error(`no step at ${seq}`);
  return step;
}

const STORED = /^\d+$/;

async function runFlow(engine: Engine) {
  zombieGate = deferred();
  zombieHolding = deferred();
  const worker = await startWorker(engine, [flow, child, failOnce, echo, zombie], {
    workerId: 'h-worker',
    concurrency: 4,
    pollIntervalMs: 100,
    heartbeatIntervalMs: LEASE_MS / 3,
  });
  const handle = await engine.client.start(flow, {});
  await stepsReach([worker], engine, handle.runId, (s) => s.some((x) => x.kind === 'signal'), 'the wait');
  await handle.signal(go, 'go');
  // The echo completes, and the turn it woke has committed (it delivered the echo's outcome), before the hour's
  // timer fires: the clock is moved only then, with no turn lease held.
  await stepsReach(
    [worker],
    engine,
    handle.runId,
    (s) => s.some((x) => x.name === 'h-echo' && x.delivered_seq !== null),
    'the echo delivered',
  );
  await advanceClock(engine, HOUR_MS);
  await zombieHolding.promise;
  // The zombie's lease (and its reclaim delay) runs out by the database clock: the step is claimed again.
  await advanceClock(engine, LEASE_MS + 1_000);
  const output = await handle.result({ timeoutMs: 30_000 });
  const rejected = nextEvent(worker.events, 'attempt:stale-rejected');
  zombieGate.resolve();
  await rejected;
  await checkOnEvents([worker], async () => (await handle.describe()).events.length >= 20, 'the history');
  return { handle, output, worker };
}

describe('a workflow run’s history, stored and derived', () => {
  const target = useEngineTarget('postgres');

  it('shows every event once, with every field, in the order it happened', async () => {
    const engine = await target.engine();
    const { handle, output } = await runFlow(engine);
    expect(output).toBe('a!,go,go,GO,GO (fresh)');

    const d = await handle.describe();
    const steps = await stepsOf(engine, handle.runId);
    const attempts = (await attemptsOf(engine, handle.runId)).filter((a) => a.kind === 'activity');
    const claims = (seq: number) => attempts.filter((a) => a.seq === seq);
    const childRunId = d.children[0]?.id;
    expect(childRunId).toMatch(/^[0-9a-f-]{36}$/);
    const [fail1, fail2] = claims(0);
    const [z1, z2] = claims(5);
    const createdMs = (seq: number) => stepAt(steps, seq).created_at_ms;
    const claimed = (
      a: (typeof attempts)[number] | undefined,
      seq: number,
      reclaimed: string | null = null,
    ) => ({
      type: 'attempt:claimed',
      seq,
      id: /^claim:\d+$/,
      attempt: a?.attempt,
      epoch: a?.epoch,
      token: a?.token,
      workerId: 'h-worker',
      data: {
        leaseExpiresAt: expect.any(String) as string,
        reclaimedFromToken: reclaimed,
        previousAttemptEnded: reclaimed === null ? null : 'lease_expired',
      },
      at: a?.claimed_at_ms,
    });
    const expected: Expected[] = [
      {
        type: 'run:started',
        seq: null,
        id: /^(\d+|started:[0-9a-f-]{36})$/,
        data: { workflow: 'h-flow', queue: 'default' },
        at: d.run.createdAt.getTime(),
      },
      {
        type: 'step:scheduled',
        seq: 0,
        id: /^(\d+|scheduled:[0-9a-f-]{36})$/,
        data: { name: 'h-fail-once', seq: 0, dueAt: expect.any(String) as string },
        at: createdMs(0),
      },
      claimed(fail1, 0),
      {
        type: 'attempt:failed',
        seq: 0,
        id: STORED,
        attempt: 1,
        epoch: 1,
        token: fail1?.token,
        workerId: 'h-worker',
        data: expect.objectContaining({
          error: expect.objectContaining({ message: 'not yet', type: 'NotYet' }) as unknown,
        }),
      },
      claimed(fail2, 0),
      {
        type: 'step:completed',
        seq: 0,
        id: /^completed:[0-9a-f-]{36}$/,
        attempt: 2,
        epoch: 2,
        token: fail2?.token,
        workerId: 'h-worker',
        data: null,
      },
      { type: 'signal:waiting', seq: 1, id: STORED, data: { name: 'h-go', seq: 1, dueAt: null } },
      {
        type: 'signal:received',
        seq: 1,
        id: STORED,
        data: { name: 'h-go', seq: 1, signalId: expect.stringMatching(/^\d+$/) as string },
      },
      {
        type: 'step:scheduled',
        seq: 2,
        id: /^(\d+|scheduled:[0-9a-f-]{36})$/,
        data: { name: 'h-echo', seq: 2, dueAt: expect.any(String) as string },
        at: createdMs(2),
      },
      {
        type: 'timer:started',
        seq: 3,
        id: STORED,
        data: { name: 'sleep', seq: 3, dueAt: expect.any(String) as string },
        at: createdMs(3),
      },
      claimed(claims(2)[0], 2),
      {
        type: 'step:completed',
        seq: 2,
        id: /^completed:[0-9a-f-]{36}$/,
        attempt: 1,
        epoch: 1,
        token: claims(2)[0]?.token,
        workerId: 'h-worker',
        data: null,
      },
      { type: 'timer:fired', seq: 3, id: STORED, data: { seq: 3 } },
      {
        type: 'child:started',
        seq: 4,
        id: STORED,
        data: { name: 'h-child', seq: 4, childRunId },
        at: createdMs(4),
      },
      { type: 'step:completed', seq: 4, id: STORED, data: { childRunId } },
      {
        type: 'step:scheduled',
        seq: 5,
        id: /^(\d+|scheduled:[0-9a-f-]{36})$/,
        data: { name: 'h-zombie', seq: 5, dueAt: expect.any(String) as string },
        at: createdMs(5),
      },
      claimed(z1, 5),
      claimed(z2, 5, z1?.token ?? null),
      {
        type: 'step:completed',
        seq: 5,
        id: /^completed:[0-9a-f-]{36}$/,
        attempt: 2,
        epoch: 2,
        token: z2?.token,
        workerId: 'h-worker',
        data: null,
      },
      {
        type: 'run:completed',
        seq: null,
        id: /^(\d+|end:[0-9a-f-]{36})$/,
        data: null,
        at: d.run.finishedAt?.getTime(),
      },
      {
        type: 'attempt:stale-rejected',
        seq: 5,
        id: STORED,
        attempt: 1,
        epoch: 1,
        token: z1?.token,
        workerId: 'h-worker',
        data: expect.objectContaining({
          reason: 'superseded',
          staleToken: z1?.token,
          currentToken: z2?.token,
        }),
      },
    ];

    const seqOf = (e: EventDescription) =>
      e.stepId === null ? null : steps.find((s) => s.id === e.stepId)?.seq;
    expect(d.events.map((e) => [e.type, seqOf(e)])).toEqual(expected.map((e) => [e.type, e.seq]));
    expect(
      d.events.map((e) => ({
        type: e.type,
        seq: seqOf(e),
        id: e.id,
        attempt: e.attempt,
        epoch: e.epoch,
        token: e.token,
        workerId: e.workerId,
        data: e.data,
      })),
    ).toEqual(
      expected.map((e) => ({
        type: e.type,
        seq: e.seq,
        id: expect.stringMatching(e.id) as string,
        attempt: e.attempt ?? null,
        epoch: e.epoch ?? null,
        token: e.token ?? null,
        workerId: e.workerId ?? null,
        data: e.data,
      })),
    );
    // Times: as stored (ms precision of the public shape), never going back.
    for (const [k, e] of expected.entries()) {
      if (e.at !== undefined) expect(d.events[k]?.at.getTime(), `${e.type} ${e.seq}`).toBe(Math.floor(e.at));
    }
    const times = d.events.map((e) => e.at.getTime());
    expect(times).toEqual([...times].sort((x, y) => x - y));
    // A step granted or due at once says so: it was due when it was scheduled.
    for (const e of d.events.filter((x) => x.type === 'step:scheduled')) {
      expect(new Date((e.data as { dueAt: string }).dueAt).getTime(), String(seqOf(e))).toBe(e.at.getTime());
    }
    expect(new Set(d.events.map((e) => e.id)).size).toBe(d.events.length);

    // watch() yields the same events, in the same order, each once, up to the run's end at least (it ends there).
    const watched: EventDescription[] = [];
    for await (const e of handle.watch()) {
      const { stepName: _name, cursor: _cursor, ...event } = e;
      watched.push(event);
    }
    expect(watched.length).toBeGreaterThanOrEqual(d.events.findIndex((e) => e.type === 'run:completed') + 1);
    expect(watched).toEqual(d.events.slice(0, watched.length));
  });
});
