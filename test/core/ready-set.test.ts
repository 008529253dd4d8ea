/**
 * `ready`, the claimable set of activity steps (migration 0024, STORAGE.md §3.2): scheduling state only. A claim
 * picks from it but re-checks the step row under its lock, so a stale row — its step completed, or its lease
 * renewed since the row was due — is never granted, and the claim corrects it; a lease that did expire is still
 * reclaimed with a larger token. And every statement that changes a step keeps `ready` exactly in step with the
 * claimable steps (test/support/ready-set.ts).
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import type { Engine } from '@palisade/engine';
import { advanceClock, setClockOffset } from '@palisade/engine/testing';
import {
  claimSteps,
  completeStep,
  expireSteps,
  failStep,
  heartbeatSteps,
  type ClaimedStepRow,
} from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { readyMismatches } from '../support/ready-set.js';
import { attemptRefOf, attemptsOfStep, stepOfRun } from './engine-rows.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const LEASE_MS = 30_000;
/** No backoff: a reclaim is due the moment the lease expires. */
const NO_BACKOFF = { maximumAttempts: 10, initialIntervalMs: 0, jitter: 0 };

const job = emptyActivity('ready-job', { leaseMs: LEASE_MS, retry: NO_BACKOFF });

function claim(engine: Engine, limit = 1, names: readonly string[] = [job.name]): Promise<ClaimedStepRow[]> {
  return claimSteps(engine.database, engine.names, {
    workerId: 'ready-test',
    claimRequestId: randomUUID(),
    queues: ['default'],
    activityNames: names,
    limit,
  });
}

/** The `ready` rows of one step: their due times (ISO, DB clock) and expiry flag. */
async function readyRowsOf(engine: Engine, stepId: string): Promise<{ due_at: string; expiring: boolean }[]> {
  return engine.database.rows(sql`
    SELECT to_char(due_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS due_at, expiring
      FROM ${engine.names.ready} WHERE step_id = ${stepId}::uuid ORDER BY due_at`);
}

async function nextRunAtOf(engine: Engine, stepId: string): Promise<string> {
  const [row] = await engine.database.rows<{ t: string }>(sql`
    SELECT to_char(next_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS t
      FROM ${engine.names.steps} WHERE id = ${stepId}::uuid`);
  if (!row) throw new Error(`no step ${stepId}`);
  return row.t;
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`the ready set on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('never grants a completed step through a stale ready row, and deletes that row', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      const run = await engine.client.enqueue(job, {});
      const step = await stepOfRun(engine, run.runId);
      expect(await readyRowsOf(engine, step.id)).toHaveLength(1);
      const [grant] = await claim(engine);
      expect(grant?.id).toBe(step.id);
      await completeStep(engine.database, engine.names, { ...attemptRefOf(grant!), output: {} });
      expect(await readyRowsOf(engine, step.id)).toEqual([]);

      // A stale row for the completed step, due long ago (as a lost update or a bug would leave it).
      await engine.database.rows(sql`
        INSERT INTO ${engine.names.ready} (queue, priority, due_at, name, step_id, run_id)
        VALUES ('default', 0, ${engine.names.now} - interval '1 hour', ${job.name}, ${step.id}::uuid,
                ${run.runId}::uuid)`);
      expect(await claim(engine, 10)).toEqual([]);
      expect(await readyRowsOf(engine, step.id)).toEqual([]); // corrected, not left to be met again
      expect((await stepOfRun(engine, run.runId)).status).toBe('completed');
      expect(await attemptsOfStep(engine, step.id)).toHaveLength(1);
      expect(await readyMismatches(engine)).toEqual([]);
    });

    it('never grants a renewed lease through a stale ready row, moves the row, and reclaims once the lease expires', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      const run = await engine.client.enqueue(job, {});
      const step = await stepOfRun(engine, run.runId);
      const [first] = await claim(engine);
      expect(first?.id).toBe(step.id);
      const firstDue = await nextRunAtOf(engine, step.id); // the first lease's end (no reclaim delay)
      expect(await readyRowsOf(engine, step.id)).toEqual([{ due_at: firstDue, expiring: false }]);

      await advanceClock(engine, 10_000);
      const [renewed] = await heartbeatSteps(engine.database, engine.names, [
        { stepId: step.id, token: BigInt(first!.token), nonce: first!.nonce },
      ]);
      expect(renewed?.renewed).toBe(true);
      const renewedDue = await nextRunAtOf(engine, step.id);
      expect(await readyRowsOf(engine, step.id)).toEqual([{ due_at: renewedDue, expiring: false }]);

      // Make the row stale: due at the first lease's end, as a heartbeat that did not move it would leave it.
      await engine.database.rows(sql`
        UPDATE ${engine.names.ready} SET due_at = ${firstDue}::timestamp AT TIME ZONE 'UTC'
         WHERE step_id = ${step.id}::uuid`);
      await advanceClock(engine, 25_000); // past the first lease's end, 5 s before the renewed one's
      expect(await claim(engine, 10)).toEqual([]); // the live lease is not taken
      expect(await readyRowsOf(engine, step.id)).toEqual([{ due_at: renewedDue, expiring: false }]);
      expect(await readyMismatches(engine)).toEqual([]);
      const held = await stepOfRun(engine, run.runId);
      expect([held.status, held.token]).toEqual(['running', first!.token]);

      await advanceClock(engine, 5_001); // the renewed lease has expired by the DB clock
      const [second] = await claim(engine);
      expect(second?.id).toBe(step.id);
      expect(BigInt(second!.token)).toBeGreaterThan(BigInt(first!.token));
      expect([second!.prev_token, second!.attempt, second!.epoch]).toEqual([first!.token, 2, 2]);
      expect(await readyRowsOf(engine, step.id)).toEqual([
        { due_at: await nextRunAtOf(engine, step.id), expiring: false },
      ]);
      const [zombie] = await heartbeatSteps(engine.database, engine.names, [
        { stepId: step.id, token: BigInt(first!.token), nonce: first!.nonce },
      ]);
      expect(zombie?.renewed).toBe(false);
      expect((await attemptsOfStep(engine, step.id)).map((a) => a.outcome)).toEqual(['lease_expired', null]);
    });

    it('keeps ready in step when one statement moves, ends, makes claimable and corrects several steps at once', async () => {
      // The ready triggers run once per statement (migration 0028), over all the rows it wrote: each kind of change
      // must reach each row, including rows written by different WITH queries of one statement.
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      const n = engine.names;
      const steps: string[] = [];
      for (let i = 0; i < 6; i++)
        steps.push((await stepOfRun(engine, (await engine.client.enqueue(job, {})).runId)).id);
      const [moved, ended, revived, stale, untouched, other] = steps as [
        string,
        string,
        string,
        string,
        string,
        string,
      ];
      await engine.database.rows(sql`
        UPDATE ${n.steps} SET status = 'completed', next_run_at = NULL WHERE id = ${revived}::uuid`);
      // A stale set: the row of `stale` is gone (as a lost update would leave it); its next move makes it afresh.
      await engine.database.rows(sql`DELETE FROM ${n.ready} WHERE step_id = ${stale}::uuid`);
      await engine.database.rows(sql`
        WITH first AS (
          UPDATE ${n.steps}
             SET status = CASE WHEN id = ${ended}::uuid THEN 'completed'
                               WHEN id = ${revived}::uuid THEN 'scheduled' ELSE status END,
                 next_run_at = CASE WHEN id = ${moved}::uuid THEN next_run_at + interval '1 hour'
                                    WHEN id = ${ended}::uuid THEN NULL
                                    WHEN id = ${revived}::uuid THEN ${n.now}
                                    WHEN id = ${stale}::uuid THEN next_run_at + interval '1 minute'
                                    ELSE next_run_at END
           WHERE id IN (${moved}::uuid, ${ended}::uuid, ${revived}::uuid, ${stale}::uuid, ${untouched}::uuid)
          RETURNING 1),
        second AS (
          UPDATE ${n.steps} SET priority = 5 WHERE id = ${other}::uuid RETURNING 1)
        SELECT (SELECT count(*) FROM first) + (SELECT count(*) FROM second) AS written`);
      expect(await readyMismatches(engine)).toEqual([]);
      // A statement whose only change is the move of rows that are not where their old versions say.
      await engine.database.rows(
        sql`DELETE FROM ${n.ready} WHERE step_id IN (${stale}::uuid, ${moved}::uuid)`,
      );
      await engine.database.rows(sql`
        UPDATE ${n.steps} SET next_run_at = next_run_at + interval '1 minute'
         WHERE id IN (${stale}::uuid, ${moved}::uuid, ${untouched}::uuid)`);
      expect(await readyMismatches(engine)).toEqual([]);
      expect(await readyRowsOf(engine, ended)).toEqual([]);
      for (const id of [moved, revived, stale, untouched, other])
        expect(await readyRowsOf(engine, id)).toHaveLength(1);
      expect((await readyRowsOf(engine, moved))[0]?.due_at).toBe(await nextRunAtOf(engine, moved));
      expect((await readyRowsOf(engine, stale))[0]?.due_at).toBe(await nextRunAtOf(engine, stale));
      await engine.database.rows(sql`DELETE FROM ${n.steps} WHERE id IN (${moved}::uuid, ${stale}::uuid)`);
      expect(await readyMismatches(engine)).toEqual([]);
      expect(await readyRowsOf(engine, moved)).toEqual([]);
    });

    it('keeps ready equal to the claimable steps through enqueue, claim, heartbeat, completion, failure, backoff, rate deferral, cancel, expiry, retry and prune', async () => {
      const engine = await target.engine();
      await setClockOffset(engine, 0);
      const consistent = async (when: string) =>
        expect([when, await readyMismatches(engine)]).toEqual([when, []]);
      const flaky = emptyActivity('ready-flaky', {
        leaseMs: LEASE_MS,
        retry: { maximumAttempts: 2, initialIntervalMs: 5_000, jitter: 0 },
      });
      const once = emptyActivity('ready-once', { leaseMs: LEASE_MS, retry: { maximumAttempts: 1 } });
      const names = [job.name, flaky.name, once.name];

      const done = await engine.client.enqueue(job, {});
      const beat = await engine.client.enqueue(job, {});
      const failing = await engine.client.enqueue(flaky, {});
      const cancelled = await engine.client.enqueue(job, {});
      const requested = await engine.client.enqueue(flaky, {});
      const lost = await engine.client.enqueue(once, {});
      const rated = [
        await engine.client.enqueue(job, {}, { rateLimit: { key: 'r', limit: 1, periodMs: 60_000 } }),
        await engine.client.enqueue(job, {}, { rateLimit: { key: 'r', limit: 1, periodMs: 60_000 } }),
      ];
      const keyed = [
        await engine.client.enqueue(job, {}, { concurrency: { key: 'k', limit: 1 } }),
        await engine.client.enqueue(job, {}, { concurrency: { key: 'k', limit: 1 } }),
      ];
      const later = await engine.client.enqueue(job, {}, { delayMs: 3_600_000 });
      await consistent('after enqueue');
      expect(await readyRowsOf(engine, (await stepOfRun(engine, later.runId)).id)).toHaveLength(1);

      const grants = new Map((await claim(engine, 20, names)).map((g) => [g.run_id, g]));
      // One of each flow-controlled pair waits: the rate-limited one deferred, the keyed one left as it was.
      expect(grants.size).toBe(8);
      await consistent('after the claim');
      const g = (runId: string) => {
        const grant = grants.get(runId);
        if (!grant) throw new Error(`run ${runId} was not claimed`);
        return grant;
      };

      await advanceClock(engine, 10_000);
      const [renewal] = await heartbeatSteps(engine.database, engine.names, [
        { stepId: g(beat.runId).id, token: BigInt(g(beat.runId).token), nonce: g(beat.runId).nonce },
      ]);
      expect(renewal?.renewed).toBe(true);
      await consistent('after a heartbeat');
      await completeStep(engine.database, engine.names, { ...attemptRefOf(g(done.runId)), output: {} });
      const keyedHolder = keyed.find((k) => grants.has(k.runId))!;
      await completeStep(engine.database, engine.names, {
        ...attemptRefOf(g(keyedHolder.runId)),
        output: {},
      });
      await consistent('after completions');
      await failStep(engine.database, engine.names, {
        ...attemptRefOf(g(failing.runId)),
        error: { type: 'Error', message: 'once', nonRetryable: false },
        retry: true,
      });
      await consistent('after a failure with a retry due later');
      expect(await cancelled.cancel('test')).toBe('cancelled'); // a job's running step ends at once
      await consistent('after a cancel of a running step');
      // A cancel request a holder has not acknowledged (as a workflow's cancel leaves it): ended at lease expiry.
      await engine.database.rows(sql`
        UPDATE ${engine.names.steps} SET cancel_requested_at = ${engine.names.now}
         WHERE id = ${g(requested.runId).id}::uuid`);
      await consistent('after a cancel request of a running step');

      // Past every lease but the renewed one: expiry ends the step whose cancel was requested and the one without
      // attempts left.
      await advanceClock(engine, LEASE_MS - 10_000 + 1);
      const expired = await expireSteps(engine.database, engine.names);
      expect(expired.map((e) => e.run_id).sort()).toEqual([requested.runId, lost.runId].sort());
      await consistent('after expiry');
      const again = await claim(engine, 20, names);
      // The other keyed step (its key is free now) and the failed step's retry; the rate window is still full.
      expect(again.map((a) => a.run_id).sort()).toEqual(
        [failing.runId, keyed.find((k) => k !== keyedHolder)!.runId].sort(),
      );
      await consistent('after a second claim');
      const retried = again.find((a) => a.run_id === failing.runId)!;
      await failStep(engine.database, engine.names, {
        ...attemptRefOf(retried),
        error: { type: 'Error', message: 'twice', nonRetryable: true },
        retry: false,
      });
      await expect(failing.result({ timeoutMs: 10_000 })).rejects.toMatchObject({ code: 'RUN_FAILED' });
      await engine.client.retry(failing.runId);
      await consistent('after a run retry');
      expect(await readyRowsOf(engine, (await stepOfRun(engine, failing.runId)).id)).toHaveLength(1);

      await advanceClock(engine, 24 * 3_600_000);
      await engine.pruneRuns({ olderThanMs: 1 });
      await consistent('after a prune');
      for (const r of rated) await r.cancel('test');
      await consistent('after cancels of scheduled steps');
    });
  });
}
