/**
 * A fenced write judges the lease by the database clock read AFTER it holds its locks. PostgreSQL re-checks a
 * statement's WHERE after a lock wait only when the row it waited for was changed; a row another statement only
 * locked (a batch that locked a step and then rejected it, a rejection reading `cur`, a run's lock) is not
 * re-checked. A fence that read `now()` before such a wait would pass a lease that ran out during the wait
 * (found by chaos T16 on the batched completion; here every fenced write of that kind is checked): a heartbeat
 * would renew an expired lease, a fenced transaction would commit, a completion or failure would be recorded.
 *
 * Each case: claim a step, lock its row lock-only in another session, start the
 * fenced write, wait until it blocks on that lock, move the database clock past the lease, release the lock:
 * the write must be refused as expired.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { LeaseLostError } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import {
  claimSteps,
  completeSteps,
  failStep,
  fenceStep,
  heartbeatSteps,
  type ClaimedStepRow,
} from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { pollFor } from '../support/wait.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { attemptRefOf } from './engine-rows.js';

const LEASE_MS = 30_000;

const job = emptyActivity('fenced-job', {
  leaseMs: LEASE_MS,
  run: () => Promise.resolve({}),
});

type Write = (engine: Engine, row: ClaimedStepRow) => Promise<'refused' | 'accepted'>;

/** 'refused' when the write throws LeaseLostError (any other error fails the test: a timeout is no refusal). */
const refusedIfLeaseLost = (write: Promise<unknown>) =>
  write.then(
    () => 'accepted' as const,
    (error: unknown) => {
      if (error instanceof LeaseLostError) return 'refused' as const;
      throw error;
    },
  );

const writes: Record<string, Write> = {
  heartbeat: async (engine, row) => {
    const [answer] = await heartbeatSteps(engine.database, engine.names, [
      { stepId: row.id, token: BigInt(row.token), nonce: row.nonce },
    ]);
    return answer?.renewed ? 'accepted' : 'refused';
  },
  'fenced transaction': (engine, row) =>
    engine.database.transaction(async (tx) =>
      (await fenceStep(tx, engine.names, attemptRefOf(row))) ? 'accepted' : 'refused',
    ),
  completion: async (engine, row) => {
    const {
      rows: [answer],
    } = await completeSteps(engine.database, engine.names, [{ ...attemptRefOf(row), output: {} }]);
    return answer?.applied ? 'accepted' : 'refused';
  },
  failure: (engine, row) =>
    refusedIfLeaseLost(
      failStep(engine.database, engine.names, {
        ...attemptRefOf(row),
        error: { type: 'Error', message: 'late', nonRetryable: true },
        retry: false,
        outcome: 'failed',
      }),
    ),
};

describe('a fenced write waiting on a lock judges the lease after the wait', () => {
  const target = useEngineTarget('postgres');

  for (const [name, write] of Object.entries(writes)) {
    it(`refuses a ${name} whose lease ran out while it waited on a row lock`, async () => {
      const engine = await target.engine();
      const { runId } = await engine.client.enqueue(job, {});
      const [row] = await claimSteps(engine.database, engine.names, {
        workerId: 'w1',
        claimRequestId: randomUUID(),
        queues: ['default'],
        activityNames: [job.name],
        limit: 1,
      });
      expect(row?.run_id).toBe(runId);
      const claimed = row as ClaimedStepRow;

      const admin = target.sql();
      const steps = admin(`${engine.names.schema}.steps`);
      let pending: Promise<'refused' | 'accepted'> | undefined;
      await admin.begin(async (tx) => {
        // Locked, never changed: what a batch that rejected the row, or a rejection's `cur`, leaves behind.
        await tx`SELECT 1 FROM ${steps} WHERE id = ${claimed.id} FOR NO KEY UPDATE`;
        pending = write(engine, claimed);
        await pollFor(`the ${name} to wait on the step's lock`, async () => {
          await tx`SELECT pg_stat_clear_snapshot()`;
          const [blocked] = await tx<{ pid: number }[]>`
            SELECT pid FROM pg_stat_activity WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))`;
          return blocked;
        });
        await advanceClock(engine, LEASE_MS + 1_000);
      });
      expect(await pending).toBe('refused');
      const [step] = await engine.database.rows<{
        status: string;
        lease_expires_at_ms: number;
        now_ms: number;
      }>(sql`
        SELECT status, (extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_expires_at_ms,
               (extract(epoch FROM ${engine.names.now}) * 1000)::float8 AS now_ms
          FROM ${engine.names.steps} WHERE id = ${claimed.id}::uuid`);
      // Nothing moved the step on: still the expired attempt's, its lease not renewed.
      expect(step?.status).toBe('running');
      expect(step?.lease_expires_at_ms).toBeLessThan(step?.now_ms ?? 0);
    });
  }
});
