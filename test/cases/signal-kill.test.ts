/**
 * Signals under a killed worker (issue 13). The run is `signal-waiter` (test/fixtures/activities.ts): step A, a
 * wait for the signal `go`, then the step the signal names, each a `record-step` whose attempts write one
 * `executions` row when they start. W1 and W2 are worker processes on one database; W1 runs the run alone until
 * the fault point, then W2 starts and W1 is SIGKILLed. (a) W1 dies while the run waits: nothing is leased, the
 * signal sent afterwards is taken once, by W2. (b) W1 dies inside the turn that took the signal, before its
 * commit: the signal is still pending, W2's replay takes it, once. Each point is announced by the code that
 * reached it.
 */
import { describe, expect, it } from 'vitest';
import { goSignal } from '../fixtures/activities.js';
import type { FaultCase } from '../support/fault-case.js';
import { useCrashSuite } from '../support/crash-suite.js';
import { sigkill, type StepResult } from '../support/process-case.js';
import type { RunRecords } from '../support/run-records.js';
import type { WorkerProcess } from '../support/worker-process.js';

const FOREVER_MS = 60_000;
/** Turns of a `signal-waiter` run up to the one that is handed the signal: A, the wait, the signal. */
const TURN_WITH_SIGNAL = 3;

describe('signals: a worker killed while its run waits, or while it takes the signal', () => {
  const {
    setUpPair: setUp,
    workflows: { signalWaiter },
  } = useCrashSuite({ pollIntervalMs: 200 });

  /** The run's waits as stored, and its signals: which wait took each. */
  async function signalRecords(c: FaultCase, runId: string) {
    const waits = await c.sql.unsafe<{ id: string; status: string; delivered_seq: number | null }[]>(
      `SELECT id::text, status, delivered_seq FROM "${c.schema}".steps WHERE run_id = $1 AND kind = 'signal'`,
      [runId],
    );
    const signals = await c.sql.unsafe<{ name: string; step_id: string | null }[]>(
      `SELECT name, step_id::text FROM "${c.schema}".signals WHERE run_id = $1 ORDER BY id`,
      [runId],
    );
    const received = await c.sql.unsafe<{ n: number }[]>(
      `SELECT count(*)::int AS n FROM "${c.schema}".events WHERE run_id = $1 AND type = 'signal:received'`,
      [runId],
    );
    return { waits, signals, received: received[0]?.n };
  }

  /** The run ended with A from W1 and B from W2, each executed once, and the signal taken once, by the wait. */
  async function expectTakenOnce(c: FaultCase, db: RunRecords, runId: string, output: StepResult[]) {
    expect(output.map((r) => [r.step, r.workerId])).toEqual([
      ['A', 'w1'],
      ['B', 'w2'],
    ]);
    const executions = await db.executions(runId);
    expect(executions.map((e) => e.label)).toEqual(['A', 'B']);
    const { waits, signals, received } = await signalRecords(c, runId);
    expect(waits).toHaveLength(1);
    expect(waits[0]?.status).toBe('completed');
    expect(signals).toEqual([{ name: 'go', step_id: waits[0]?.id }]);
    expect(received).toBe(1);
    expect((await db.attempts(runId)).filter((a) => a.outcome === null)).toEqual([]);
  }

  /** The second turn of the run committed blocked: it made the wait. */
  function waiting(w1: WorkerProcess, runId: string) {
    let turns = 0;
    return w1.waitFor('turn:committed', (m) => m.runId === runId && ++turns === 2);
  }

  it('(a) killed while the run waits: nothing is leased; the signal sent afterwards is taken once, by W2', async () => {
    const { c, db, w1, w2 } = await setUp();
    const handle = await c.engine.client.start(signalWaiter, {});
    const runId = handle.runId;
    expect(await waiting(w1, runId)).toMatchObject({ outcome: 'blocked' });
    await sigkill(w1);
    // Waiting holds nothing: no live attempt, no turn lease.
    expect((await db.attempts(runId)).filter((a) => a.outcome === null)).toEqual([]);
    const [run] = await c.sql.unsafe<{ leased: boolean }[]>(
      `SELECT turn_lease_expires_at IS NOT NULL AS leased FROM "${c.schema}".runs WHERE id = $1`,
      [runId],
    );
    expect(run).toEqual({ leased: false });
    await handle.signal(goSignal, { step: 'B' });
    await w2.start();
    const output = await handle.result({ timeoutMs: 30_000 });
    await expectTakenOnce(c, db, runId, output);
  });

  it('(b) killed inside the turn that took the signal: still pending, W2 replays and takes it once', async () => {
    const { c, db, w1, w2 } = await setUp();
    const handle = await c.engine.client.start(signalWaiter, {
      blockTurn: { turnAttempt: TURN_WITH_SIGNAL, ms: FOREVER_MS },
    });
    const runId = handle.runId;
    await waiting(w1, runId);
    await handle.signal(goSignal, { step: 'B' });
    const blocking = await w1.waitFor('fixture:turn-blocking', (m) => m.runId === runId);
    expect(blocking.turnAttempt).toBe(TURN_WITH_SIGNAL);
    // The turn was handed the signal and has committed nothing: the signal is pending, the wait scheduled.
    const before = await signalRecords(c, runId);
    expect(before.signals).toEqual([{ name: 'go', step_id: null }]);
    expect(before.waits.map((w) => [w.status, w.delivered_seq])).toEqual([['scheduled', null]]);
    await w2.start();
    await sigkill(w1);
    const output = await handle.result({ timeoutMs: 30_000 });
    await expectTakenOnce(c, db, runId, output);
    const turns = (await db.attempts(runId)).filter((a) => a.kind === 'turn');
    expect(turns.map((t) => [t.attempt, t.worker_id, t.outcome])).toContainEqual([
      TURN_WITH_SIGNAL,
      'w1',
      'lease_expired',
    ]);
  });
});
