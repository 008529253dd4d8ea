/**
 * The turn queue (migration 0025, STORAGE.md §3.2): the claimable workflow turns live in `turn_queue`, kept by
 * triggers on `runs`, and the turn claim reads them there. What must hold whatever the queue says:
 * - a run has exactly one queue row while it is a live workflow run with a turn due (due at `turn_next_run_at`) or
 *   held (due at the lease's end), and none otherwise, at every snapshot, whatever the workload did;
 * - the queue is scheduling state only: a stale row (the turn committed since, or granted again) is never granted —
 *   the claim judges the turn on the locked run row — and the claim deletes it, so no claim meets it again;
 * - a turn whose lease expired is due again and is taken over with a larger token.
 *
 * The turn claim is called directly (`claimTurns`) where the test needs one grant at a time, as claim-race does.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSignal } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { claimTurns, type ClaimedTurnRow } from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { startWorker } from '../support/worker.js';
import { checkOnEvents } from '../support/wait.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { attemptsOf, runOf, stepOfKindReached } from '../workflow/workflow-rows.js';

const job = emptyActivity('job');
const note = defineSignal({ name: 'note', payload: z.string() });
const threeSteps = noInputWorkflow('three-steps', z.number(), async (ctx) => {
  for (let i = 0; i < 3; i++) await ctx.run(job, {});
  return 3;
});
const sleeper = noInputWorkflow('sleeper', z.string(), async (ctx) => {
  await ctx.run(job, {});
  await ctx.sleep('1h');
  await ctx.run(job, {});
  return 'woke';
});
const waiter = noInputWorkflow('waiter', z.string(), async (ctx) => ctx.waitForSignal(note));
const parent = noInputWorkflow('parent', z.number(), async (ctx) => ctx.runChild(threeSteps, {}));
const failing = noInputWorkflow('failing', z.string(), () => Promise.reject(new Error('by design')));
const ALL = [job, threeSteps, sleeper, waiter, parent, failing];

const LEASE_MS = 30_000;

/** One claim of the turns of `workflowNames` on the default queue by `workerId`, as a worker's claim loop sends it. */
function claim(
  engine: Engine,
  workerId: string,
  workflowNames: readonly string[],
  leaseMs = LEASE_MS,
): Promise<ClaimedTurnRow[]> {
  return claimTurns(engine.database, engine.names, {
    workerId,
    queues: ['default'],
    workflowNames,
    limit: 10,
    leaseMs,
    keepsInstances: false,
  });
}

interface QueueRow {
  run_id: string;
  queue: string;
  priority: number;
  name: string;
  due_ms: number;
}

/** The rows of `turn_queue` (of one run, or all), in run id and due time order. */
async function queueRows(engine: Engine, runId?: string): Promise<QueueRow[]> {
  return engine.database.rows<QueueRow>(sql`
    SELECT run_id::text, queue, priority, name, (extract(epoch FROM due_at) * 1000)::float8 AS due_ms
      FROM ${engine.names.turnQueue}
     WHERE ${runId === undefined ? sql`true` : sql`run_id = ${runId}::uuid`}
     ORDER BY run_id, due_at`);
}

/**
 * In one snapshot: the queue rows the runs call for, by the rule written out here rather than by the engine's
 * `turn_queue_due` (a live workflow run with `turn_next_run_at` set, due at the later of it and its turn lease's end),
 * and the rows the queue holds. Equal when every run with a due or held turn has exactly one row, with its key, and
 * no row names a run without one.
 */
async function queueAgainstRuns(engine: Engine): Promise<{ want: string[]; have: string[] }> {
  const rows = await engine.database.rows<{ want: string[] | null; have: string[] | null }>(sql`
    SELECT (SELECT array_agg(concat_ws(' ', id, queue, priority, name,
                                       greatest(turn_next_run_at, turn_lease_expires_at)) ORDER BY id)
              FROM ${engine.names.runs}
             WHERE kind = 'workflow' AND status IN ('pending', 'running') AND turn_next_run_at IS NOT NULL) AS want,
           (SELECT array_agg(concat_ws(' ', run_id, queue, priority, name, due_at) ORDER BY run_id, due_at)
              FROM ${engine.names.turnQueue}) AS have`);
  return { want: rows[0]?.want ?? [], have: rows[0]?.have ?? [] };
}

async function expectQueueInStep(engine: Engine, what: string): Promise<void> {
  const { want, have } = await queueAgainstRuns(engine);
  expect(have, what).toEqual(want);
}

/** Put a row in the queue by hand: the row a stale scheduler would have left, due `dueInMs` from the DB clock. */
async function plantQueueRow(engine: Engine, runId: string, dueInMs: number): Promise<void> {
  await engine.database.rows(sql`
    INSERT INTO ${engine.names.turnQueue} (queue, priority, due_at, run_id, name)
    SELECT queue, priority, ${engine.names.now} + ${dueInMs}::int * interval '1 millisecond', id, name
      FROM ${engine.names.runs} WHERE id = ${runId}::uuid`);
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`turn queue on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('holds one row per due or held turn and none other, at every step of a mixed workload', async () => {
      const engine = await target.engine();
      const worker = await startWorker(engine, ALL, { pollIntervalMs: 50 });
      const started = await Promise.all([
        engine.client.start(threeSteps, {}),
        engine.client.start(threeSteps, {}),
        engine.client.start(sleeper, {}),
        engine.client.start(sleeper, {}),
        engine.client.start(waiter, {}),
        engine.client.start(waiter, {}),
        engine.client.start(waiter, {}),
        engine.client.start(parent, {}),
        engine.client.start(failing, {}),
      ]);
      const [a, b, sleepy1, sleepy2, signalled, cancelled, waiting, parentRun, failed] = started;
      // Checked after every turn a worker commits, while it works on: the triggers write the queue in the statement
      // that writes the run row, so every committed snapshot shows the two in step.
      const checks: Promise<string | null>[] = [];
      const inStep = () =>
        checks.push(
          queueAgainstRuns(engine).then(({ want, have }) =>
            JSON.stringify(want) === JSON.stringify(have)
              ? null
              : `want ${want.join(', ')}; have ${have.join(', ')}`,
          ),
        );
      worker.events.on('turn:committed', inStep);
      await expect(a.result({ timeoutMs: 30_000 })).resolves.toBe(3);
      await expect(b.result({ timeoutMs: 30_000 })).resolves.toBe(3);
      await expect(parentRun.result({ timeoutMs: 30_000 })).resolves.toBe(3);
      await expect(failed.result({ timeoutMs: 30_000 })).rejects.toThrow();
      for (const h of [signalled, cancelled, waiting])
        await stepOfKindReached([worker], engine, h.runId, 'signal', 'the wait for a signal');
      for (const h of [sleepy1, sleepy2])
        await stepOfKindReached([worker], engine, h.runId, 'timer', 'the sleep');
      await expectQueueInStep(engine, 'waits and sleeps');
      // Sleepers have their row at the timer's due time; waiters, finished and failed runs have none.
      expect((await queueRows(engine)).map((r) => r.run_id).sort()).toEqual(
        [sleepy1.runId, sleepy2.runId].sort(),
      );
      expect((await queueRows(engine, sleepy1.runId))[0]?.due_ms).toBe(
        (await runOf(engine, sleepy1.runId)).turn_next_run_at_ms,
      );

      await signalled.signal(note, 'hello');
      await expect(signalled.result({ timeoutMs: 30_000 })).resolves.toBe('hello');
      await cancelled.cancel('not needed');
      await expect(cancelled.result({ timeoutMs: 30_000 })).rejects.toThrow();
      await expectQueueInStep(engine, 'after a signal and a cancel');
      await worker.stop();

      // A held turn: due at its lease's end, not at its due time.
      await advanceClock(engine, 3_600_000);
      await expectQueueInStep(engine, 'timers due');
      const held = await claim(engine, 'holder', ['sleeper']);
      expect(held.map((t) => t.id).sort()).toEqual([sleepy1.runId, sleepy2.runId].sort());
      await expectQueueInStep(engine, 'turns held');
      const heldRow = (await queueRows(engine, sleepy1.runId))[0];
      const heldRun = await engine.database.rows<{ lease_ms: number }>(sql`
        SELECT (extract(epoch FROM turn_lease_expires_at) * 1000)::float8 AS lease_ms
          FROM ${engine.names.runs} WHERE id = ${sleepy1.runId}::uuid`);
      expect(heldRow?.due_ms).toBe(heldRun[0]?.lease_ms);

      // The held turns run out; a new worker takes them over and finishes every run: the queue empties but for
      // the run still waiting for its signal, which never had a row.
      await advanceClock(engine, LEASE_MS + 1_000);
      const second = await startWorker(engine, ALL, { pollIntervalMs: 50 });
      second.events.on('turn:committed', inStep);
      await expect(sleepy1.result({ timeoutMs: 30_000 })).resolves.toBe('woke');
      await expect(sleepy2.result({ timeoutMs: 30_000 })).resolves.toBe('woke');
      await checkOnEvents([second], async () => (await queueRows(engine)).length === 0, 'an empty queue');
      await expectQueueInStep(engine, 'the end');
      expect((await runOf(engine, waiting.runId)).status).toBe('running');
      await second.stop();
      expect(checks.length).toBeGreaterThan(10);
      expect((await Promise.all(checks)).filter((c) => c !== null)).toEqual([]);
    });

    it('never grants a stale queue row (a turn granted or committed since) and deletes it', async () => {
      const engine = await target.engine();
      // No worker of this engine runs the workflow: its first turn waits in the queue for a claim.
      const handle = await engine.client.start(threeSteps, {});
      expect(await queueRows(engine, handle.runId)).toHaveLength(1);
      const [first] = await claim(engine, 'first', ['three-steps']);
      expect(first?.id).toBe(handle.runId);
      const granted = await queueRows(engine, handle.runId);
      expect(granted).toHaveLength(1);

      // The row as it was before the grant, due now: the run row says the turn is held.
      await plantQueueRow(engine, handle.runId, -1_000);
      expect(await claim(engine, 'second', ['three-steps'])).toEqual([]);
      expect(await queueRows(engine, handle.runId)).toEqual(granted);
      expect(await claim(engine, 'third', ['three-steps'])).toEqual([]);
      const run = await runOf(engine, handle.runId);
      expect(run.turn_token).toBe(first?.token);
      expect((await attemptsOf(engine, handle.runId)).map((x) => x.worker_id)).toEqual(['first']);

      // A turn that committed: the run waits for its signal and has no row; a planted due row is not granted.
      const worker = await startWorker(engine, ALL, { pollIntervalMs: 50 });
      const waiting = await engine.client.start(waiter, {});
      await stepOfKindReached([worker], engine, waiting.runId, 'signal', 'the wait for a signal');
      await worker.stop();
      expect(await queueRows(engine, waiting.runId)).toEqual([]);
      const attemptsBefore = await attemptsOf(engine, waiting.runId);
      await plantQueueRow(engine, waiting.runId, -1_000);
      expect(await claim(engine, 'late', ['waiter'])).toEqual([]);
      expect(await queueRows(engine, waiting.runId)).toEqual([]);
      expect(await attemptsOf(engine, waiting.runId)).toEqual(attemptsBefore);
      await expectQueueInStep(engine, 'stale rows corrected');
    });

    it('takes over a turn whose lease expired, with a larger token, and not before', async () => {
      const engine = await target.engine();
      const handle = await engine.client.start(threeSteps, {});
      const [first] = await claim(engine, 'first', ['three-steps'], 1_000);
      expect(first?.id).toBe(handle.runId);
      expect(await claim(engine, 'early', ['three-steps'])).toEqual([]);

      await advanceClock(engine, 1_500);
      const [second] = await claim(engine, 'second', ['three-steps']);
      expect(second?.id).toBe(handle.runId);
      expect(BigInt(second?.token ?? '0')).toBeGreaterThan(BigInt(first?.token ?? '0'));
      expect(second?.turn_epoch).toBe((first?.turn_epoch ?? 0) + 1);
      const turns = (await attemptsOf(engine, handle.runId)).filter((x) => x.kind === 'turn');
      expect(turns.map((x) => [x.worker_id, x.outcome])).toEqual([
        ['first', 'lease_expired'],
        ['second', null],
      ]);
      await expectQueueInStep(engine, 'taken over');
    });
  });
}
