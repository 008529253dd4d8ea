/**
 * Signals (issue 13): `client.signal` / `handle.signal` / `signalWithStart` store a signal durably, in arrival
 * order; `ctx.waitForSignal` takes the oldest pending one of its kind, at once when it was sent before the wait,
 * or as soon as it arrives (the run is woken by NOTIFY: these workers poll once a minute). A wait holds no lease,
 * can time out, replays with the payload it took, and a signal the code never waits for is kept and shown.
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { defineActivity, defineSignal, defineWorkflow, isPalisadeError } from '@palisade/sdk';
import { advanceClock, setFaultHook } from '@palisade/engine/testing';
import type { Engine, Worker } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, deferred, runOf, stepsOf, stepsReach, type StoredStep } from './workflow-rows.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { echoActivity } from '../fixtures/pure-activity.js';

const HOUR_MS = 3_600_000;
/** Longer than any test: a run that makes progress was woken by a NOTIFY, not by a poll. */
const POLL_MS = 60_000;

const note = defineSignal({ name: 'note', payload: z.string() });
const approval = defineSignal({
  name: 'approval',
  payload: z.object({ approved: z.boolean(), by: z.string().min(1) }),
});

/** Waits for `notes` notes, then an approval; returns what it got, in order. */
const review = defineWorkflow({
  name: 'review',
  input: z.object({ notes: z.number().int() }),
  output: z.object({ notes: z.array(z.string()), approved: z.boolean(), by: z.string() }),
  async run({ notes }, ctx) {
    const got: string[] = [];
    for (let i = 0; i < notes; i++) got.push(await ctx.waitForSignal(note));
    const decision = await ctx.waitForSignal(approval);
    return { notes: got, approved: decision.approved, by: decision.by };
  },
});

/** Waits an hour at most for an approval; on a timeout it escalates. */
const patient = noInputWorkflow('patient', z.string(), async (ctx) => {
  const wait = await ctx.waitForSignal(approval, { timeoutMs: '1h' });
  return wait.timedOut ? 'escalated' : `approved by ${wait.payload.by}`;
});

const echo = echoActivity('echo', z.string());

/** An activity, then a note, then an activity with the note: a signal between steps. */
const between = noInputWorkflow('between', z.string(), async (ctx) => {
  const first = await ctx.run(echo, 'first');
  const got = await ctx.waitForSignal(note);
  return `${first}+${await ctx.run(echo, got)}`;
});

/** The signal waits of a run: position, status and stored outcome. */
function waitsIn(steps: readonly StoredStep[]) {
  return steps
    .filter((s) => s.kind === 'signal')
    .map((s) => ({ seq: s.seq, name: s.name, status: s.status, output: s.output }));
}

async function waitsOf(engine: Engine, runId: string) {
  return waitsIn(await stepsOf(engine, runId));
}

/** Resolve once run `runId` has a signal wait at position `seq` (checked after each event of `worker`). */
function waitAt(worker: Worker, engine: Engine, runId: string, seq: number, what: string): Promise<void> {
  return stepsReach([worker], engine, runId, (steps) => waitsIn(steps).some((w) => w.seq === seq), what);
}

/** Resolve once run `runId` has made its first signal wait. */
function firstWait(worker: Worker, engine: Engine, runId: string, what = 'the wait'): Promise<void> {
  return stepsReach([worker], engine, runId, (steps) => waitsIn(steps).length === 1, what);
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`signals on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('delivers signals sent before, during and after a wait, in arrival order, exactly once', async () => {
      const engine = await target.engine();
      const handle = await engine.client.start(review, { notes: 3 });
      // Before the run has had a turn: kept, then taken by the first waits in the order they were sent.
      await handle.signal(note, 'one');
      await engine.client.signal(handle.runId, note, 'two');
      const worker = await startWorker(engine, [review], { pollIntervalMs: POLL_MS });
      await stepsReach(
        [worker],
        engine,
        handle.runId,
        (steps) => waitsIn(steps).some((w) => w.seq === 2 && w.status === 'scheduled'),
        'the third wait',
      );
      // During a wait: it wakes the run at once.
      await handle.signal(note, 'three');
      await waitAt(worker, engine, handle.runId, 3, 'the approval wait');
      await handle.signal(approval, { approved: true, by: 'ada' });
      // After the run took what it waited for: kept, pending, shown.
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({
        notes: ['one', 'two', 'three'],
        approved: true,
        by: 'ada',
      });
      await expect(handle.signal(note, 'late')).rejects.toMatchObject({
        code: 'RUN_ENDED',
        status: 'completed',
      });

      const waits = await waitsOf(engine, handle.runId);
      expect(waits.map((w) => [w.seq, w.name, w.status])).toEqual([
        [0, 'note', 'completed'],
        [1, 'note', 'completed'],
        [2, 'note', 'completed'],
        [3, 'approval', 'completed'],
      ]);
      const { signals, events } = await handle.describe();
      expect(signals.map((g) => [g.name, g.payload, g.stepSeq])).toEqual([
        ['note', 'one', 0],
        ['note', 'two', 1],
        ['note', 'three', 2],
        ['approval', { approved: true, by: 'ada' }, 3],
      ]);
      expect(events.filter((e) => e.type === 'signal:received')).toHaveLength(4);
      // Waiting held no lease: no activity attempts at all, only turns.
      expect((await attemptsOf(engine, handle.runId)).every((a) => a.kind === 'turn')).toBe(true);
    });

    it('keeps a signal the code never waits for, and shows it undelivered once the run ends', async () => {
      const engine = await target.engine();
      await startWorker(engine, [review], { pollIntervalMs: POLL_MS });
      const handle = await engine.client.start(review, { notes: 0 });
      await handle.signal(note, 'unread');
      await handle.signal(approval, { approved: false, by: 'bo' });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({
        notes: [],
        approved: false,
        by: 'bo',
      });
      const { signals } = await handle.describe();
      expect(signals.map((g) => [g.name, g.stepId === null, g.undelivered])).toEqual([
        ['note', true, { reason: 'run-ended', status: 'completed' }],
        ['approval', false, null],
      ]);
    });

    it('times out by the database clock, holding no lease meanwhile; a later signal is kept', async () => {
      const engine = await target.engine();
      const worker = await startWorker(engine, [patient], { pollIntervalMs: 50 });
      const handle = await engine.client.start(patient, {});
      await firstWait(worker, engine, handle.runId);
      const run = await runOf(engine, handle.runId);
      expect(run.turn_lease_expires_at).toBeNull();
      const [wait] = await stepsOf(engine, handle.runId);
      expect(run.turn_next_run_at_ms).toBe(wait?.next_run_at_ms);
      await advanceClock(engine, HOUR_MS);
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('escalated');
      expect(await waitsOf(engine, handle.runId)).toEqual([
        { seq: 0, name: 'approval', status: 'completed', output: { timedOut: true } },
      ]);
      const events = (await handle.describe()).events.map((e) => e.type);
      expect(events).toContain('signal:timed-out');
    });

    it('takes a signal that comes before the timeout', async () => {
      const engine = await target.engine();
      const worker = await startWorker(engine, [patient], { pollIntervalMs: POLL_MS });
      const handle = await engine.client.start(patient, {});
      await firstWait(worker, engine, handle.runId);
      await handle.signal(approval, { approved: true, by: 'cy' });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('approved by cy');
    });

    it('fails the run at a wait given the old name `timeout`, naming the new one; fixed and retried, it waits', async () => {
      // `patient` as it was written before `timeout` was renamed `timeoutMs`.
      const patientWithOldOption = defineWorkflow({
        name: 'patient',
        input: z.object({}),
        output: z.string(),
        async run(_input, ctx) {
          const wait = await ctx.waitForSignal(approval, { timeout: '1h' } as unknown as {
            timeoutMs: string;
          });
          return wait.timedOut ? 'escalated' : `approved by ${wait.payload.by}`;
        },
      });
      const engine = await target.engine();
      const first = engine.worker({ workflows: [patientWithOldOption], pollIntervalMs: POLL_MS });
      await first.start();
      const handle = await engine.client.start(patientWithOldOption, {});
      const failed = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(isPalisadeError(failed, 'RUN_FAILED'), String(failed)).toBe(true);
      expect(failed).toMatchObject({
        failure: {
          type: 'InvalidOptionsError',
          message:
            '[INVALID_OPTIONS] invalid ctx.waitForSignal(approval) in workflow patient: ' +
            'Unrecognized key: "timeout" (renamed: "timeout" is now "timeoutMs")',
        },
      });
      expect(await waitsOf(engine, handle.runId)).toEqual([]); // refused at the call: no wait was recorded
      await first.stop();
      // The code fixed (the same workflow, `timeoutMs`): a retry replays the run, and it waits as meant.
      const second = engine.worker({ workflows: [patient], pollIntervalMs: POLL_MS });
      await second.start();
      await engine.client.retry(handle.runId);
      await stepsReach([second], engine, handle.runId, (steps) => waitsIn(steps).length === 1, 'the wait');
      await handle.signal(approval, { approved: true, by: 'di' });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('approved by di');
    });

    it('delivers a signal between activities, on kept instances and on full replays alike', async () => {
      const engine = await target.engine();
      for (const workflowCacheSize of [undefined, 0]) {
        const worker = await startWorker(engine, [between, echo], {
          pollIntervalMs: POLL_MS,
          ...(workflowCacheSize === undefined ? {} : { workflowCacheSize }),
        });
        const handle = await engine.client.start(between, {});
        await firstWait(worker, engine, handle.runId);
        await handle.signal(note, `n${workflowCacheSize ?? 'kept'}`);
        await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe(
          `first+n${workflowCacheSize ?? 'kept'}`,
        );
        await worker.stop();
      }
    });

    it('replays a finished wait with the payload it took, in a new worker', async () => {
      const engine = await target.engine();
      const first = await startWorker(engine, [review], { pollIntervalMs: POLL_MS });
      const handle = await engine.client.start(review, { notes: 2 });
      await handle.signal(note, 'kept-1');
      await waitAt(first, engine, handle.runId, 1, 'the second wait');
      await first.stop();
      // A new worker replays the first wait from its recorded outcome (no kept instance), then takes the rest.
      await startWorker(engine, [review], { pollIntervalMs: POLL_MS, workflowCacheSize: 0 });
      await handle.signal(note, 'kept-2');
      await handle.signal(approval, { approved: true, by: 'dee' });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({
        notes: ['kept-1', 'kept-2'],
        approved: true,
        by: 'dee',
      });
    });

    it('refuses a bad payload, an unknown run, an activity run and a finished one, each with its own code', async () => {
      const engine = await target.engine();
      const handle = await engine.client.start(review, { notes: 0 });
      const bad = await handle
        .signal(approval, { approved: 'yes' as unknown as boolean, by: 'x' })
        .catch((e: unknown) => e);
      expect(bad).toMatchObject({ code: 'VALIDATION_FAILED' });
      expect(String((bad as Error).message)).toMatch(/payload of signal approval.*approved/s);
      expect((await handle.describe()).signals).toEqual([]);

      await expect(
        engine.client.signal('00000000-0000-4000-8000-000000000000', note, 'x'),
      ).rejects.toMatchObject({ code: 'RUN_NOT_FOUND' });
      await expect(engine.client.signal('not-a-run', note, 'x')).rejects.toMatchObject({
        code: 'RUN_NOT_FOUND',
      });
      const job = await engine.client.enqueue(echo, 'x');
      await expect(engine.client.signal(job.runId, note, 'x')).rejects.toMatchObject({
        code: 'INVALID_OPTIONS',
      });
      await expect(
        engine.client.signal(handle.runId, { name: 'note' } as unknown as typeof note, 'x'),
      ).rejects.toMatchObject({ code: 'INVALID_OPTIONS' });

      await handle.cancel('test');
      await startWorker(engine, [review], { pollIntervalMs: 50 });
      await handle.result({ timeoutMs: 15_000 }).catch(() => undefined);
      const ended = await handle.signal(note, 'x').catch((e: unknown) => e);
      expect(isPalisadeError(ended, 'RUN_ENDED')).toBe(true);
      expect(ended).toMatchObject({ status: 'cancelled', runId: handle.runId });
    });

    it('signalWithStart starts the run once for its key and signals it every time', async () => {
      const engine = await target.engine();
      await startWorker(engine, [review], { pollIntervalMs: POLL_MS });
      const a = await engine.client.signalWithStart(review, { notes: 1 }, note, 'first', { key: 'order-7' });
      const b = await engine.client.signalWithStart(
        review,
        { notes: 1 },
        approval,
        { approved: true, by: 'e' },
        {
          key: 'order-7',
        },
      );
      expect([a.created, b.created, b.runId]).toEqual([true, false, a.runId]);
      await expect(a.result({ timeoutMs: 15_000 })).resolves.toEqual({
        notes: ['first'],
        approved: true,
        by: 'e',
      });
      // A bad payload starts nothing.
      await expect(
        engine.client.signalWithStart(review, { notes: 1 }, note, 7 as unknown as string, { key: 'order-8' }),
      ).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
      expect((await engine.client.list({ name: 'review' })).length).toBe(1);
    });

    it("signalWithStart refuses a bad option or definition naming signalWithStart's options, and starts nothing", async () => {
      const engine = await target.engine();
      const refusals: string[] = [];
      for (const call of [
        () => engine.client.signalWithStart(review, { notes: 1 }, note, 'x', { key: 'k', delay: 5 } as never),
        () => engine.client.signalWithStart(review, { notes: 1 }, note, 'x', { key: 'k', priority: 1e9 }),
        () => engine.client.signalWithStart({} as typeof review, { notes: 1 }, note, 'x', { key: 'k' }),
      ]) {
        refusals.push(String(((await call().catch((e: unknown) => e)) as Error).message));
      }
      expect(refusals).toEqual([
        '[INVALID_OPTIONS] invalid signalWithStart options of review: ' +
          'Unrecognized key: "delay" (renamed: "delay" is now "delayMs")',
        '[INVALID_OPTIONS] invalid signalWithStart options of review: priority: Too big: expected number to be <=1000',
        '[INVALID_OPTIONS] invalid signalWithStart: workflow: must be a workflow from defineWorkflow()',
      ]);
      expect(await engine.client.list()).toEqual([]);
    });

    it('signalWithStart is one transaction: a failure before the signal is stored leaves no run', async () => {
      const engine = await target.engine();
      setFaultHook('client:signal-with-start:before-signal', () =>
        Promise.reject(new Error('injected: the process died between the start and the signal')),
      );
      onTestFinished(() => setFaultHook('client:signal-with-start:before-signal', undefined));
      await expect(
        engine.client.signalWithStart(review, { notes: 1 }, note, 'lost?', { key: 'order-9' }),
      ).rejects.toThrow(/injected/);
      // Neither the run nor the signal: a run started without the signal it was started for would wait for ever.
      expect(await engine.client.list({ name: 'review' })).toEqual([]);
      setFaultHook('client:signal-with-start:before-signal', undefined);
      const handle = await engine.client.signalWithStart(review, { notes: 1 }, note, 'kept', {
        key: 'order-9',
      });
      expect(handle.created).toBe(true);
      expect((await handle.describe()).signals.map((g) => g.payload)).toEqual(['kept']);
    });

    it('wakes the run again for a signal sent while the turn that makes the wait is running', async () => {
      const engine = await target.engine();
      const worker = workerFor(engine, [review], { pollIntervalMs: POLL_MS });
      const handle = await engine.client.start(review, { notes: 1 });
      // Between the first turn's run and its commit (it has made the wait and not seen the signal): send it.
      let sent = false;
      setFaultHook('turn:before-commit', async (turn) => {
        if (turn.runId !== handle.runId || sent) return;
        sent = true;
        await engine.client.signal(handle.runId, note, 'mid-turn');
      });
      onTestFinished(() => setFaultHook('turn:before-commit', undefined));
      await worker.start();
      await checkOnEvents([worker], () => sent, 'the signal sent mid-turn');
      await waitAt(worker, engine, handle.runId, 1, 'the approval wait');
      await handle.signal(approval, { approved: true, by: 'fi' });
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({
        notes: ['mid-turn'],
        approved: true,
        by: 'fi',
      });
    });

    it("marks undelivered, at the run's end, a signal sent while its final turn computed; refuses one sent after", async () => {
      const engine = await target.engine();
      const worker = workerFor(engine, [review], { pollIntervalMs: POLL_MS });
      const handle = await engine.client.start(review, { notes: 0 });
      // The approval is there before the first turn: that turn takes it and returns — the run's final turn.
      await handle.signal(approval, { approved: true, by: 'ju' });
      // Between that turn's replay and its commit, a note arrives: accepted (the run is still running).
      let lateId: string | undefined;
      setFaultHook('turn:before-commit', async (turn) => {
        if (turn.runId !== handle.runId || lateId !== undefined) return;
        lateId = await engine.client.signal(handle.runId, note, 'while ending');
      });
      onTestFinished(() => setFaultHook('turn:before-commit', undefined));
      await worker.start();
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({
        notes: [],
        approved: true,
        by: 'ju',
      });
      expect(lateId).toBeDefined();
      // Not left pending for ever: the end recorded it undelivered, and says so in describe() and the history.
      const { signals, events } = await handle.describe();
      expect(signals.map((g) => [g.name, g.stepSeq, g.undelivered, g.consumedAt !== null])).toEqual([
        ['approval', 0, null, true],
        ['note', null, { reason: 'run-ended', status: 'completed' }, true],
      ]);
      expect(
        events
          .filter((e) => e.type === 'signal:undelivered')
          .map((e) => (e.data as { signalId: string }).signalId),
      ).toEqual([lateId]);
      // After the end a signal is refused: no accepted signal goes unaccounted for.
      await expect(handle.signal(note, 'after the end')).rejects.toMatchObject({
        code: 'RUN_ENDED',
        status: 'completed',
      });
    });

    it.runIf(driver === 'postgres')(
      'runs the final turn again when a signal committed while its ending commit waited for the run row',
      async () => {
        const schema = `t_${Math.random().toString(16).slice(2, 12)}`;
        const engine = await target.engine({ schema });
        const sql = target.sql();
        const worker = workerFor(engine, [review], { pollIntervalMs: POLL_MS });
        const handle = await engine.client.start(review, { notes: 0 });
        await handle.signal(approval, { approved: true, by: 'ka' });
        // A sender that holds the run row (as sendSignal does) while the final turn's commit statement starts: the
        // statement's snapshot is older than the signal, which commits while the statement waits for the row.
        let holder: Awaited<ReturnType<typeof sql.reserve>> | undefined;
        let holderPid = 0;
        setFaultHook('turn:before-commit', async (turn) => {
          if (turn.runId !== handle.runId || holder) return;
          holder = await sql.reserve();
          holderPid = (await holder<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`)[0]?.pid ?? 0;
          await holder`BEGIN`;
          await holder.unsafe(`SELECT 1 FROM "${schema}".runs WHERE id = $1 FOR NO KEY UPDATE`, [
            handle.runId,
          ]);
          await holder.unsafe(
            `INSERT INTO "${schema}".signals (run_id, name, payload, request_id, created_at)
             VALUES ($1, 'note', '"raced"', gen_random_uuid(), now())`,
            [handle.runId],
          );
          await holder.unsafe(`UPDATE "${schema}".runs SET wake_count = wake_count + 1 WHERE id = $1`, [
            handle.runId,
          ]);
        });
        onTestFinished(() => setFaultHook('turn:before-commit', undefined));
        await worker.start();
        // Only the database knows when the commit statement waits for the row: asked at most 500 times, 10 ms apart.
        for (let i = 0; i < 500; i++) {
          const [row] = await sql<{ n: number }[]>`
            SELECT count(*)::int AS n FROM pg_stat_activity WHERE ${holderPid} = ANY(pg_blocking_pids(pid))`;
          if (holderPid !== 0 && (row?.n ?? 0) > 0) break;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        await holder?.unsafe('COMMIT');
        holder?.release();
        await expect(handle.result({ timeoutMs: 15_000 })).resolves.toMatchObject({ by: 'ka' });
        const { signals, turns } = await handle.describe();
        expect(signals.map((g) => [g.name, g.undelivered])).toEqual([
          ['approval', null],
          ['note', { reason: 'run-ended', status: 'completed' }],
        ]);
        // The turn whose snapshot missed the signal was handed back, not committed.
        expect(turns.map((t) => t.outcome)).toEqual(['released', 'completed']);
      },
    );

    it('with fused steps: a signal sent while an activity runs reaches the wait its completion leads to', async () => {
      const engine = await target.engine();
      const gate = deferred();
      const started = deferred();
      const held = defineActivity({
        name: 'held',
        input: z.string(),
        output: z.string(),
        async run(s) {
          started.resolve();
          await gate.promise;
          return s;
        },
      });
      const afterHeld = noInputWorkflow('after-held', z.string(), async (ctx) => {
        const first = await ctx.run(held, 'held');
        return `${first}+${await ctx.waitForSignal(note)}`;
      });
      await startWorker(engine, [afterHeld, held], { pollIntervalMs: POLL_MS, fuseSteps: true });
      const handle = await engine.client.start(afterHeld, {});
      await started.promise;
      await handle.signal(note, 'early');
      gate.resolve();
      await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe('held+early');
    });

    it('refuses at the wait a payload its schema rejects, records why, and keeps waiting: the run never fails', async () => {
      const engine = await target.engine();
      // The same signal name without the schema: what `palisade runs signal` sends (it has no module loaded).
      const unchecked = defineSignal({ name: 'approval', payload: z.unknown() });
      const length = defineSignal({ name: 'length', payload: z.string().transform((s) => s.length) });
      const strict = noInputWorkflow(
        'strict',
        z.object({ by: z.string(), length: z.number() }),
        async (ctx) => {
          const { by } = await ctx.waitForSignal(approval);
          return { by, length: await ctx.waitForSignal(length) };
        },
      );
      for (const workflowCacheSize of [0, 10]) {
        const worker = await startWorker(engine, [strict], { pollIntervalMs: POLL_MS, workflowCacheSize });
        const handle = await engine.client.start(strict, {});
        // One before the wait exists, one while it waits: each is refused there, and the run goes on waiting.
        await handle.signal(unchecked, { approved: 'yes', by: 'x' });
        await firstWait(worker, engine, handle.runId, 'the approval wait');
        await handle.signal(unchecked, 'approve!');
        await checkOnEvents(
          [worker],
          async () => (await handle.describe()).signals.every((g) => g.consumedAt !== null),
          'the second bad payload refused',
        );
        expect((await handle.describe()).run.status).toBe('running');
        await handle.signal(approval, { approved: true, by: 'gi' });
        // The schema's output, not its input: a transform runs when the code takes the signal.
        await handle.signal(length, 'abcd');
        await expect(handle.result({ timeoutMs: 15_000 })).resolves.toEqual({ by: 'gi', length: 4 });
        await worker.stop();

        const { signals, events } = await handle.describe();
        expect(signals.map((g) => [g.name, g.stepSeq, g.undelivered?.reason ?? null])).toEqual([
          ['approval', null, 'invalid-payload'],
          ['approval', null, 'invalid-payload'],
          ['approval', 0, null],
          ['length', 1, null],
        ]);
        const why = signals.map((g) =>
          g.undelivered?.reason === 'invalid-payload' ? g.undelivered : undefined,
        );
        expect(why[0]?.seq).toBe(0);
        expect(why[0]?.message).toMatch(
          /^payload of signal approval #\d+ does not fit ctx\.waitForSignal\(approval\) in workflow strict: approved: /,
        );
        expect(why[1]?.message).toMatch(/\(root\): .*object/i);
        const rejected = events.filter((e) => e.type === 'signal:rejected');
        expect(rejected.map((e) => (e.data as { signalId: string }).signalId)).toEqual(
          signals.slice(0, 2).map((g) => g.id),
        );
        // A retry of the run (here: of nothing failed) is never needed: no wait holds the bad payloads.
        expect((await waitsOf(engine, handle.runId)).map((w) => w.status)).toEqual([
          'completed',
          'completed',
        ]);
      }
    });

    it('cancels a waiting run: the wait rejects with CancelledFailure', async () => {
      const engine = await target.engine();
      const seen: string[] = [];
      const cancellable = noInputWorkflow('cancellable', z.string(), async (ctx) => {
        try {
          return await ctx.waitForSignal(note);
        } catch (error) {
          seen.push((error as { code?: string }).code ?? 'none');
          throw error;
        }
      });
      const worker = await startWorker(engine, [cancellable], { pollIntervalMs: POLL_MS });
      const handle = await engine.client.start(cancellable, {});
      await firstWait(worker, engine, handle.runId);
      await handle.cancel('no longer needed');
      await expect(handle.result({ timeoutMs: 15_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
      expect(seen).toContain('CANCELLED');
    });
  });
}
