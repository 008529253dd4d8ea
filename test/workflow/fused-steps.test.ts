/**
 * Fused steps (worker option `fuseSteps`, off by default): when an activity of a workflow run completes on the worker that keeps the run's workflow instance,
 * the worker runs the run's next turn on that instance at once, with the step's output as the only news, and one
 * statement records the completion, grants the turn (a fresh token from the global sequence, an attempts row) and
 * commits it, eagerly dispatching what it schedules: one statement per step of a sequential workflow. The statement
 * applies only while the completing attempt holds its step and nothing else changed the run since the instance's
 * last turn; otherwise the completion is recorded the ordinary way and the next turn replays in full — with the
 * same history either way.
 */
import { PgDialect } from 'drizzle-orm/pg-core';
import type { SQL } from 'drizzle-orm';
import { describe, expect, it, onTestFinished } from 'vitest';
import { z } from 'zod';
import { CancelledFailure, defineActivity, defineWorkflow } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { setFaultHook } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { attemptsOf, deferred, stepsOf, turnLog, lastTurn } from './workflow-rows.js';
import { add, counter } from './counter-workflow.js';
import { cancelWhileTurnRuns } from './cancel-race.js';
import { checkOnEvents } from '../support/wait.js';
import { workerFor } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const dialect = new PgDialect();

/** Count the engine's statements by kind: batched completions, turn commits and fused steps. */
function countStatements(engine: Engine): Map<string, number> {
  const counts = new Map<string, number>();
  const db = engine.database;
  const send = db.rows.bind(db);
  db.rows = async <T>(query: SQL): Promise<T[]> => {
    const text = dialect.sqlToQuery(query).sql;
    const kind = text.includes('eager_pick AS')
      ? 'completion'
      : text.includes('lk.turn_worker_id =')
        ? 'fused'
        : text.includes('turn_attempt AS')
          ? 'turn-commit'
          : undefined;
    if (kind) counts.set(kind, (counts.get(kind) ?? 0) + 1);
    return send<T>(query);
  };
  return counts;
}

/** Fused steps are off by default (see WorkerOptions.fuseSteps). */
const FUSED = { fuseSteps: true } as const;

/** An output whose keys JavaScript and jsonb order differently. */
const shuffled = noInputActivity('shuffled', z.record(z.string(), z.number()), () =>
  Promise.resolve({ zeta: 1, b: 2, '10': 3, alpha: 4, a: 5, é: 6 }),
);
const echo = pureActivity('echo', z.object({ keys: z.string() }), z.string(), ({ keys }) => keys);
/** Schedules a step whose input is the key order the code saw. */
const keyOrder = noInputWorkflow('key-order', z.string(), async (ctx) => {
  const out = await ctx.run(shuffled, {});
  return ctx.run(echo, { keys: Object.keys(out).join(',') });
});

/** Released by the test that holds `held` (one per test). */
let gate = deferred();
const held = noInputActivity('held', z.number(), async () => {
  await gate.promise;
  return 1;
});
/**
 * Steps that return together: each waits until `size` of them run on this worker, then all return in one tick, so
 * their completions reach the worker's completion path at once (the shape of parallel steps that end together).
 */
let together: { size: number; waiting: (() => void)[] } = { size: 3, waiting: [] };
const joint = defineActivity({
  name: 'joint',
  input: z.object({ n: z.number() }),
  output: z.number(),
  async run({ n }) {
    await new Promise<void>((resolve) => {
      together.waiting.push(resolve);
      if (together.waiting.length < together.size) return;
      const all = together.waiting;
      together.waiting = [];
      for (const go of all) go();
    });
    return n + 1;
  },
});
/** Rounds of three parallel `joint` steps, each round's input the sum of the last. */
const rounds = defineWorkflow({
  name: 'rounds',
  input: z.object({ rounds: z.number() }),
  output: z.number(),
  async run({ rounds }, ctx) {
    let n = 0;
    for (let r = 0; r < rounds; r++) {
      const three = await Promise.all([1, 2, 3].map((k) => ctx.run(joint, { n: n + k })));
      n = three.reduce((sum, x) => sum + x, 0);
    }
    return n;
  },
});

const cancellable = noInputWorkflow('cancellable', z.number(), async (ctx) => {
  const first = await ctx.run(add, { n: 0 });
  const second = await ctx.run(held, {});
  return first.n + second + (await ctx.run(add, { n: 0 })).n;
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`fused steps on ${driver}`, () => {
    const target = useEngineTarget(driver);

    it('refuses a fuseSteps that is not a boolean, naming it', async () => {
      const engine = await target.engine();
      expect(() => engine.worker({ workflows: [counter], fuseSteps: 'yes' as unknown as boolean })).toThrow(
        /fuseSteps/,
      );
    });

    it('records each step of a sequential workflow and its next turn in one statement, each turn a fenced grant', async () => {
      const engine = await target.engine();
      const counts = countStatements(engine);
      const worker = workerFor(engine, [counter, add], { pollIntervalMs: 60_000, ...FUSED });
      const turns = turnLog(worker);
      await worker.start();
      const handle = await engine.client.start(counter, { steps: 12 });
      await expect(handle.result({ timeoutMs: 60_000 })).resolves.toEqual({ n: 12 });
      await lastTurn(worker, turns, handle.runId);

      const mine = turns.filter((t) => t.runId === handle.runId);
      // The first turn by start() (eager start), every later one fused with the completion of the step before.
      expect(mine.map((t) => t.grant)).toEqual(['eager', ...Array<string>(12).fill('fused')]);
      expect(mine.slice(1).every((t) => t.replay === 'continued')).toBe(true);
      // One statement per step: no batched completion, one ordinary turn commit (the first turn's).
      expect(counts.get('completion') ?? 0).toBe(0);
      expect(counts.get('turn-commit')).toBe(1);
      expect(counts.get('fused')).toBe(12);

      // Every grant an attempt row with a fresh token, all ended completed; turn epochs 1…13, each turn's token
      // larger than the last turn's, each step's larger than the turn's that scheduled it.
      const attempts = await attemptsOf(engine, handle.runId);
      expect(attempts.filter((a) => a.kind === 'turn')).toHaveLength(13);
      expect(attempts.filter((a) => a.kind === 'activity')).toHaveLength(12);
      expect(attempts.every((a) => a.outcome === 'completed')).toBe(true);
      expect(new Set(attempts.map((a) => a.token)).size).toBe(25);
      const turnTokens = attempts.filter((a) => a.kind === 'turn').map((a) => BigInt(a.token));
      expect(turnTokens.every((t, k) => k === 0 || t > (turnTokens[k - 1] as bigint))).toBe(true);
      expect(
        attempts
          .filter((a) => a.kind === 'turn')
          .sort((a, b) => a.epoch - b.epoch)
          .map((a) => a.epoch),
      ).toEqual(Array.from({ length: 13 }, (_, k) => k + 1));

      // The steps as replay reads them: completed with their outputs, delivered in order.
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.seq, s.status, s.delivered_seq, s.output])).toEqual(
        Array.from({ length: 12 }, (_, i) => [i, 'completed', i + 1, { n: i + 1 }]),
      );
      await worker.stop();
    });

    it('hands the code an output as the database stores it, so a full replay sees the same', async () => {
      const run = async (workflowCacheSize: number) => {
        const engine = await target.engine();
        const worker = workerFor(engine, [keyOrder, shuffled, echo], {
          workflowCacheSize,
          pollIntervalMs: 60_000,
          ...FUSED,
        });
        const turns = turnLog(worker);
        await worker.start();
        const handle = await engine.client.start(keyOrder, {});
        const result = await handle.result({ timeoutMs: 60_000 });
        await lastTurn(worker, turns, handle.runId);
        await worker.stop();
        return { result, grants: turns.filter((t) => t.runId === handle.runId).map((t) => t.grant) };
      };
      const fused = await run(10);
      const replayed = await run(0);
      expect(fused.grants).toContain('fused');
      expect(replayed.grants).not.toContain('fused');
      expect(fused.result).toBe(replayed.result);
      // jsonb's key order (shorter first, then by bytes), with JavaScript's integer-like key first.
      expect(fused.result).toBe('10,a,b,é,zeta,alpha');
    });

    it('keeps the instance when parallel steps of a run complete together: each completion is fused in turn', async () => {
      together = { size: 3, waiting: [] };
      const engine = await target.engine();
      const counts = countStatements(engine);
      const worker = workerFor(engine, [rounds, joint], { pollIntervalMs: 60_000, ...FUSED });
      const turns = turnLog(worker);
      await worker.start();
      const handle = await engine.client.start(rounds, { rounds: 10 });
      let expected = 0;
      for (let r = 0; r < 10; r++) expected = 3 * expected + 9;
      await expect(handle.result({ timeoutMs: 60_000 })).resolves.toBe(expected);
      await lastTurn(worker, turns, handle.runId);
      // The three completions of a round reach the worker in one tick. Each takes the kept instance in turn (the
      // next waits while the one before holds it) and records its step with the turn it wakes: no completion
      // goes the ordinary way, and no turn replays in full (a dropped instance would make the next turn do so).
      const mine = turns.filter((t) => t.runId === handle.runId);
      expect(mine.map((t) => t.grant)).toEqual(['eager', ...Array<string>(30).fill('fused')]);
      expect(mine.slice(1).every((t) => t.replay === 'continued')).toBe(true);
      expect(counts.get('completion') ?? 0).toBe(0);
      expect(counts.get('fused')).toBe(30);
      await worker.stop();
    });

    it('records the completion the ordinary way when the run changed meanwhile (a cancel), and the run ends cancelled', async () => {
      gate = deferred();
      const engine = await target.engine();
      const counts = countStatements(engine);
      const worker = workerFor(engine, [cancellable, add, held], { pollIntervalMs: 60_000, ...FUSED });
      const turns = turnLog(worker);
      const started = deferred();
      const heldEnded = deferred();
      worker.events.on('attempt:started', (e) => {
        if (e.attempt.stepLabel.startsWith('held')) started.resolve();
      });
      const heldEnds: string[] = [];
      const onHeldEnd = (how: string) => (e: { attempt: { stepLabel: string } }) => {
        if (!e.attempt.stepLabel.startsWith('held')) return;
        heldEnds.push(how);
        heldEnded.resolve();
      };
      worker.events.on('attempt:completed', onHeldEnd('completed'));
      worker.events.on('attempt:stale-rejected', onHeldEnd('stale-rejected'));
      worker.events.on('attempt:failed', onHeldEnd('failed'));
      await worker.start();
      const handle = await engine.client.start(cancellable, {});
      await started.promise;
      // The cancel request wakes the run: a turn claimed for it before the held step completes would take the
      // kept instance, and the completion would then not be tried fused at all. Hold that turn (before it takes
      // the instance) until the completion is handled, so the completion always meets a changed run.
      setFaultHook('turn:before-run', async (turn) => {
        if (turn.runId === handle.runId && turn.grant !== 'fused') await heldEnded.promise;
      });
      onTestFinished(() => setFaultHook('turn:before-run', undefined));
      await handle.cancel('changed our mind');
      gate.resolve();
      await expect(handle.result({ timeoutMs: 60_000 })).rejects.toMatchObject({ code: 'CANCELLED' });
      await checkOnEvents(
        [worker],
        () => turns.some((t) => t.runId === handle.runId && t.outcome === 'cancelled'),
        'end',
      );
      await heldEnded.promise;
      // Step 0's completion was fused. The held step's was tried fused and not applied (the cancel request moved
      // the run), then went in one batched completion, refused: the cancel request had ended the step. The turn
      // that ended the run was an ordinary one.
      const grants = turns.filter((t) => t.runId === handle.runId).map((t) => t.grant);
      expect(grants.slice(0, 2)).toEqual(['eager', 'fused']);
      expect(grants.slice(2)).not.toContain('fused');
      expect(grants.length).toBeGreaterThan(2);
      expect(counts.get('fused')).toBe(2);
      expect(counts.get('completion')).toBe(1);
      expect(heldEnds).toEqual(['stale-rejected']);
      const steps = await stepsOf(engine, handle.runId);
      expect(steps.map((s) => [s.name, s.status])).toEqual([
        ['add', 'completed'],
        ['held', 'cancelled'],
      ]);
      const attempts = await attemptsOf(engine, handle.runId);
      const heldAttempt = attempts.find((a) => a.kind === 'activity' && a.seq === 1);
      expect(heldAttempt?.outcome).toBe('cancelled');
      await worker.stop();
    });

    it('ends the completing step too when a cancel commits while its fused turn runs: the completion is refused', async () => {
      const engine = await target.engine();
      const refused: string[] = [];
      const refusal = deferred();
      let turns: ReturnType<typeof turnLog> = [];
      const { runId, worker, error, cancelAnswer, executions } = await cancelWhileTurnRuns(
        engine,
        FUSED,
        (w) => {
          turns = turnLog(w);
          w.events.on('attempt:stale-rejected', (e) => {
            refused.push(e.error.reason);
            refusal.resolve();
          });
        },
      );
      expect(cancelAnswer).toBe('running');
      expect(error).toBeInstanceOf(CancelledFailure);
      await refusal.promise;
      // The request found `first` still running (its completion was not recorded yet) and ended it; the fused
      // statement did not apply, and the completion recorded on its own was refused as cancelled. The code's
      // await of `first` failed, outside its try: `second` and `undo` never ran.
      expect(executions).toEqual(['first']);
      expect(refused).toEqual(['cancelled']);
      expect(turns.filter((t) => t.runId === runId).map((t) => t.grant)).not.toContain('fused');
      const steps = await stepsOf(engine, runId);
      expect(steps.map((s) => [s.name, s.status])).toEqual([['first', 'cancelled']]);
      await worker.stop();
    });
  });
}
