/**
 * An activity's attempt is a row of `attempt_records` only when it ended other than by its own completion
 * (migration 0029, STORAGE.md §4 step 5a): the claim records its grant on the step row, a completion ends it there,
 * and the `attempts` view (what describe() and the history read) shows both kinds. Every other ending — a failure,
 * a release, an expiry taken over by a claim — writes the row of the grant it ended, once. A stale write refused
 * while its grant is still the step's writes an event, not a row: the grant stays open until it is taken over.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { Engine } from '@palisade/engine';
import { advanceClock, setClockOffset } from '@palisade/engine/testing';
import {
  claimSteps,
  completeStep,
  failStep,
  heartbeatSteps,
  releaseStep,
  type ClaimedStepRow,
} from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { attemptRefOf, attemptsOfStep, eventsOfRun } from './engine-rows.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const LEASE_MS = 30_000;
const NO_BACKOFF = { maximumAttempts: 10, initialIntervalMs: 0, jitter: 0 };
const job = emptyActivity('attempt-rows-job', { leaseMs: LEASE_MS, retry: NO_BACKOFF });

async function claimOne(engine: Engine, workerId: string): Promise<ClaimedStepRow> {
  const [row] = await claimSteps(engine.database, engine.names, {
    workerId,
    claimRequestId: randomUUID(),
    queues: ['default'],
    activityNames: [job.name],
    limit: 1,
  });
  if (!row) throw new Error('nothing claimed');
  return row;
}

/** The `attempt_records` rows of a step as stored (not the `attempts` view): outcome, token and the grant they copied. */
async function storedRows(engine: Engine, stepId: string) {
  return engine.database.rows<{
    outcome: string;
    token: string;
    attempt: number;
    epoch: number;
    worker_id: string;
  }>(
    sql`SELECT outcome, fencing_token::text AS token, attempt, epoch, worker_id FROM ${engine.names.attemptRecords}
         WHERE step_id = ${stepId}::uuid ORDER BY fencing_token`,
  );
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`attempt rows on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('writes no attempts row for an attempt its own completion ends, and still shows it claimed and completed', async () => {
      const engine = await target.engine();
      const run = await engine.client.enqueue(job, {});
      const grant = await claimOne(engine, 'w1');
      expect(await storedRows(engine, grant.id)).toEqual([]);
      expect(await attemptsOfStep(engine, grant.id)).toEqual([
        { attempt: 1, epoch: 1, token: grant.token, worker_id: 'w1', outcome: null },
      ]);
      await completeStep(engine.database, engine.names, { ...attemptRefOf(grant), output: {} });
      expect(await storedRows(engine, grant.id)).toEqual([]);
      const details = await engine.client.getHandle(run.runId).describe();
      const [attempt] = details.steps[0]?.attempts ?? [];
      expect(attempt).toMatchObject({ token: grant.token, workerId: 'w1', outcome: 'completed' });
      expect(attempt?.endedAt?.getTime()).toBeGreaterThanOrEqual(attempt?.claimedAt.getTime() ?? Infinity);
      const [claimed] = await eventsOfRun(engine, run.runId, 'attempt:claimed');
      expect(claimed).toMatchObject({ token: grant.token, worker_id: 'w1', attempt: 1, epoch: 1 });
      expect(typeof claimed?.data?.leaseExpiresAt).toBe('string');
    });

    it('writes the row of each grant that ends otherwise — failed, released, expired and taken over — once', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      const run = await engine.client.enqueue(job, {});

      const first = await claimOne(engine, 'w1');
      const error = { type: 'Error', message: 'boom', nonRetryable: false };
      await failStep(engine.database, engine.names, { ...attemptRefOf(first), error, retry: true });
      const second = await claimOne(engine, 'w2');
      await releaseStep(engine.database, engine.names, { ...attemptRefOf(second), why: 'shutdown' });
      const third = await claimOne(engine, 'w3');
      // Its lease runs out; before any claim takes it over, its holder's heartbeat is refused: an event says so,
      // and the grant stays the step's, open, until the claim that takes it over records how it ended.
      await advanceClock(engine, LEASE_MS + 1_000);
      const [refused] = await heartbeatSteps(engine.database, engine.names, [
        { stepId: third.id, token: BigInt(third.token), nonce: third.nonce },
      ]);
      expect(refused).toMatchObject({ renewed: false, reason: 'expired' });
      const fourth = await claimOne(engine, 'w4');
      expect(fourth.prev_token).toBe(third.token);
      await completeStep(engine.database, engine.names, { ...attemptRefOf(fourth), output: {} });

      expect(await storedRows(engine, first.id)).toEqual([
        { outcome: 'failed', token: first.token, attempt: 1, epoch: 1, worker_id: 'w1' },
        // A release gives its claim back to the budget; its row keeps the attempt number it was claimed as.
        { outcome: 'released', token: second.token, attempt: 2, epoch: 2, worker_id: 'w2' },
        { outcome: 'lease_expired', token: third.token, attempt: 2, epoch: 3, worker_id: 'w3' },
      ]);
      expect((await attemptsOfStep(engine, first.id)).map((a) => [a.token, a.outcome])).toEqual([
        [first.token, 'failed'],
        [second.token, 'released'],
        [third.token, 'lease_expired'],
        [fourth.token, 'completed'],
      ]);
      const claims = await eventsOfRun(engine, run.runId, 'attempt:claimed');
      expect(claims.map((c) => c.token)).toEqual([first.token, second.token, third.token, fourth.token]);
      expect(claims[3]?.data).toMatchObject({
        reclaimedFromToken: third.token,
        previousAttemptEnded: 'lease_expired',
      });
    });

    it('records an expired attempt taken over by a claim as lease_expired, ended when its lease did', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      await engine.client.enqueue(job, {});
      const first = await claimOne(engine, 'w1');
      await advanceClock(engine, LEASE_MS + 1_000);
      const second = await claimOne(engine, 'w2');
      const [row] = await engine.database.rows<{ outcome: string; at_lease_end: boolean }>(sql`
        SELECT a.outcome, a.ended_at = a.granted_until AS at_lease_end
          FROM ${engine.names.attemptRecords} a WHERE a.fencing_token = ${first.token}::bigint`);
      expect(row).toEqual({ outcome: 'lease_expired', at_lease_end: true });
      expect((await attemptsOfStep(engine, first.id)).map((a) => [a.token, a.outcome])).toEqual([
        [first.token, 'lease_expired'],
        [second.token, null],
      ]);
    });
  });
}
