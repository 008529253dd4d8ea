/**
 * F01 — a zombie's late completion after its job was reclaimed (shared/cases/FAILURE-CASES.md).
 *
 * Seen in a Redis queue whose lock renewal ran on the event loop that the job itself blocked. Here: a one-step
 * run whose activity writes one ledger row through `ctx.fencedTransaction` and charges a payment stub with
 * idempotency key (runId, stepId). L = 2 s, H = 0.5 s. W1 claims (t1) and BLOCKs its event loop for 6 s, so no
 * heartbeat goes out; the lease expires at ~2 s, W2 claims (t2 > t1) and completes; at 6 s W1 wakes up and
 * tries to finish. Variant: the same block in a worker_thread, while W1's event loop keeps heartbeating.
 *
 * W1 and W2 are separate processes (test/fixtures/worker-main.ts) on the same database; the payment stub is a
 * real HTTP server in this process. The run is a one-step workflow (`charge-once`, test/fixtures/activities.ts)
 * whose turns are run by whichever worker is free.
 */
import { describe, expect, it } from 'vitest';
import { fixtureActivities, fixtureWorkflows } from '../fixtures/activities.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import type { FaultCase } from '../support/fault-case.js';
import type { PaymentStub } from '../support/payment-stub.js';
import { SHORT_RETRY, heartbeatEvery, useProcessCase } from '../support/process-case.js';
import type { WorkerProcess } from '../support/worker-process.js';

const timings: FixtureTimings = { leaseMs: 2_000, retry: SHORT_RETRY };
const HEARTBEAT_MS = 500;
const BLOCK_MS = 6_000;

describe('F01: a zombie whose event loop was blocked past its lease', () => {
  const { workers, faults, config } = useProcessCase({
    timings,
    // Each heartbeat may take up to H (the engine's limit; the default is H/2), so a loaded machine does not
    // make W2 lose its own 2 s lease.
    ...heartbeatEvery(HEARTBEAT_MS),
    pollIntervalMs: 100,
  });

  /**
   * The run charged once, by `workerId` under `token`: one ledger row, and one charge at the payment stub, its
   * only request.
   */
  async function expectChargedOnce(
    c: FaultCase,
    stub: PaymentStub,
    runId: string,
    stepId: string,
    token: bigint,
    workerId: string,
  ): Promise<void> {
    expect(await c.db.ledger(runId)).toEqual([
      { token: token.toString(), worker_id: workerId, amount_cents: 1_250 },
    ]);
    expect(stub.charges()).toEqual([
      {
        key: `${runId}:${stepId}`,
        chargeId: 'ch_1',
        amountCents: 1_250,
        token: token.toString(),
        workerId,
      },
    ]);
    expect(stub.requests).toHaveLength(1);
  }

  /** W1 claims a `charge` run that blocks on its first epoch; W2 starts serving once W1 is blocked. */
  async function blockedClaim(where: 'main' | 'thread'): Promise<{
    c: FaultCase;
    stub: PaymentStub;
    w1: WorkerProcess;
    w2: WorkerProcess;
    runId: string;
    stepId: string;
    t1: bigint;
    result: Promise<unknown>;
  }> {
    const c = await faults.setUp();
    const stub = await faults.paymentStub();
    const [w1, w2] = await Promise.all([
      workers.spawn(config(c, 'w1', { paymentUrl: stub.url })),
      workers.spawn(config(c, 'w2', { paymentUrl: stub.url, deferStart: true })),
    ]);
    const { chargeOnce } = fixtureWorkflows(fixtureActivities(timings));
    const handle = await c.engine.client.start(chargeOnce, {
      amountCents: 1_250,
      block: { ms: BLOCK_MS, where, onEpoch: 1 },
    });
    const runId = handle.runId;
    const claim1 = await w1.waitFor('attempt:claimed', (m) => m.attempt.runId === runId);
    await w1.waitFor('fixture:blocking', (m) => m.attempt.runId === runId);
    await w2.start();
    return {
      c,
      stub,
      w1,
      w2,
      runId,
      stepId: claim1.attempt.stepId,
      t1: BigInt(claim1.attempt.token),
      result: handle.result({ timeoutMs: 20_000 }),
    };
  }

  it('rejects the late completion of a zombie whose event loop was blocked; the step stays as W2 left it', async () => {
    const { c, stub, w1, w2, runId, stepId, t1, result } = await blockedClaim('main');
    const ofRun = (m: { attempt: { runId: string } }) => m.attempt.runId === runId;

    // W2 reclaims once the lease expired (~2 s) and completes, while W1 is still blocked.
    // W2's next turn of the workflow then takes the step's result and completes the run.
    const claim2 = await w2.waitFor('attempt:claimed', ofRun, { timeoutMs: 10_000 });
    const completed2 = await w2.waitFor('attempt:completed', ofRun, { timeoutMs: 10_000 });
    const t2 = BigInt(completed2.attempt.token);
    expect(claim2.attempt.token).toBe(t2.toString()); // W2's first claim is the one that completed
    expect(t2).toBeGreaterThan(t1);
    expect(claim2.epoch).toBe(2);
    const output = { chargeId: 'ch_1', ledgerToken: t2.toString() };
    await expect(result).resolves.toEqual(output);
    const stepAsW2LeftIt = await c.db.step(runId);
    expect(w1.all('fixture:unblocked', ofRun)).toEqual([]); // all of that happened inside W1's block

    // W1 wakes at ~6 s and tries to finish with t1: its outcome write reaches the database and is rejected.
    const rejected = await w1.waitFor('attempt:stale-rejected', ofRun, { timeoutMs: BLOCK_MS + 10_000 });
    expect(rejected.error).toMatchObject({
      code: 'LEASE_LOST',
      reason: 'superseded',
      staleToken: t1.toString(),
      currentToken: t2.toString(),
    });
    // Its signal fired (on its local deadline, as soon as its loop ran again) …
    const signal = await w1.waitFor('fixture:signal', ofRun);
    expect(signal.reason).toBe('lease-expired-locally');
    expect(signal.wallMs).toBeLessThanOrEqual(rejected.wallMs);
    // … and its fenced ledger write was refused before it touched the database (I11); it never charged.
    expect(
      w1.all('fixture:ctx-error', ofRun).map((m) => [m.operation, m.error.code, m.error.reason]),
    ).toEqual([['fenced-transaction', 'ATTEMPT_ABORTED', 'lease-expired-locally']]);
    expect(w1.all('fixture:ledger-written', ofRun)).toEqual([]);
    expect(w1.all('fixture:charged', ofRun)).toEqual([]);
    // No outcome is announced for a rejected write.
    expect(w1.all('attempt:completed', ofRun)).toEqual([]);
    expect(w1.all('attempt:failed', ofRun)).toEqual([]);

    // The database: the step row is byte for byte what W2 left.
    const step = await c.db.step(runId);
    expect(step.row_text).toBe(stepAsW2LeftIt.row_text);
    expect(step).toMatchObject({
      id: stepId,
      status: 'completed',
      attempt: 2,
      epoch: 2,
      token: t2.toString(),
      worker_id: 'w2',
    });
    // The run is still completed with W2's result.
    expect(await c.db.run(runId)).toMatchObject({ status: 'completed', output });
    // One ledger row, written under t2. The payment stub saw one charge per key — and no call at all from the
    // zombie.
    await expectChargedOnce(c, stub, runId, stepId, t2, 'w2');
    // Attempts: t1 ended when its lease expired, t2 was granted after that and completed.
    const attempts = await c.db.attempts(runId);
    expect(attempts.map((a) => [a.attempt, a.epoch, a.token, a.worker_id, a.outcome])).toEqual([
      [1, 1, t1.toString(), 'w1', 'lease_expired'],
      [2, 2, t2.toString(), 'w2', 'completed'],
    ]);
    expect(attempts[1]?.claimed_at_ms).toBeGreaterThanOrEqual(attempts[0]?.ended_at_ms ?? Infinity);
    // History: exactly one stale write rejected — W1's late outcome — after the step completed under t2.
    const events = await c.db.events(runId);
    expect(events.map((e) => e.type)).toEqual([
      'run:started',
      'step:scheduled',
      'attempt:claimed',
      'attempt:claimed',
      'step:completed',
      'run:completed',
      'attempt:stale-rejected',
    ]);
    const stale = events.filter((e) => e.type === 'attempt:stale-rejected');
    expect(stale).toHaveLength(1);
    expect(stale[0]).toMatchObject({
      token: t1.toString(),
      worker_id: 'w1',
      data: {
        operation: 'fail',
        staleToken: t1.toString(),
        currentToken: t2.toString(),
        reason: 'superseded',
      },
    });
    expect(events.find((e) => e.type === 'step:completed')?.token).toBe(t2.toString());
  });

  it('keeps the lease of an attempt that blocks in a worker_thread: no reclaim, attempt 1, one charge', async () => {
    const { c, stub, w1, w2, runId, stepId, t1, result } = await blockedClaim('thread');
    const ofRun = (m: { attempt: { runId: string } }) => m.attempt.runId === runId;

    const completed = await w1.waitFor('attempt:completed', ofRun, { timeoutMs: BLOCK_MS + 10_000 });
    const blocking = await w1.waitFor('fixture:blocking', ofRun);
    const unblocked = await w1.waitFor('fixture:unblocked', ofRun);
    expect(unblocked.wallMs - blocking.wallMs).toBeGreaterThanOrEqual(BLOCK_MS - 50);
    // The main loop kept renewing the lease while the thread spun (~12 renewals in 6 s at H = 0.5 s; a heartbeat
    // that times out on a loaded machine is retried) and never lost it.
    const renewals = w1.all(
      'heartbeat:sent',
      (m) => m.renewed > 0 && m.wallMs > blocking.wallMs && m.wallMs < unblocked.wallMs,
    );
    expect(renewals.length).toBeGreaterThanOrEqual(BLOCK_MS / HEARTBEAT_MS / 2);
    expect(w1.all('heartbeat:sent', (m) => m.lost > 0)).toEqual([]);
    expect(w1.all('attempt:stale-rejected', ofRun)).toEqual([]);
    expect(w1.all('attempt:aborted', ofRun)).toEqual([]);
    expect(w1.all('fixture:signal', ofRun)).toEqual([]);
    // W2 was serving the whole time and never got the step.
    expect(w2.all('attempt:claimed', ofRun)).toEqual([]);
    expect(w2.all('worker:started')).toHaveLength(1);

    const output = { chargeId: 'ch_1', ledgerToken: t1.toString() };
    await expect(result).resolves.toEqual(output);
    expect(completed.attempt.token).toBe(t1.toString());
    expect(await c.db.step(runId)).toMatchObject({
      id: stepId,
      status: 'completed',
      attempt: 1,
      epoch: 1,
      token: t1.toString(),
      worker_id: 'w1',
    });
    expect(await c.db.run(runId)).toMatchObject({ status: 'completed', output });
    const attempts = await c.db.attempts(runId);
    expect(attempts.map((a) => [a.attempt, a.epoch, a.token, a.worker_id, a.outcome])).toEqual([
      [1, 1, t1.toString(), 'w1', 'completed'],
    ]);
    await expectChargedOnce(c, stub, runId, stepId, t1, 'w1');
    expect(await c.db.eventTypes(runId)).toEqual([
      'run:started',
      'step:scheduled',
      'attempt:claimed',
      'step:completed',
      'run:completed',
    ]);
  });
});
