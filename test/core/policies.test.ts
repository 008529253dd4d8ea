/**
 * `policies` (migration 0027, STORAGE.md §4 step 3): a step's options — retry policy, lease, start-to-close — are
 * a row keyed by a hash of their content, which the step names by `policy_id`, instead of a copy in every step
 * row. Each distinct set is stored once, whatever order its keys were written in, and every statement that reads
 * a step's options (here the claim) reads them through its policy.
 */
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { claimSteps } from '@palisade/engine/testing/internals';
import { useEngineTarget } from '../support/engine.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const RETRY = { maximumAttempts: 4, initialIntervalMs: 5, jitter: 0 };
const job = emptyActivity('policy-job', { leaseMs: 20_000, startToCloseTimeoutMs: 60_000, retry: RETRY });

interface StepOptions {
  run_id: string;
  policy_id: string;
  key_of_content: string;
  max_attempts: number | null;
  lease_ms: number;
  start_to_close_timeout_ms: number;
  retry_policy: Record<string, unknown>;
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`step options as policies on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('stores each distinct option set once, and a step reads its options through its policy', async () => {
      const engine = await target.engine();
      const n = engine.names;
      const same = [
        await engine.client.enqueue(job, {}),
        await engine.client.enqueue(job, {}),
        await engine.client.enqueue(job, {}),
      ];
      const longer = await engine.client.enqueue(job, {}, { leaseMs: '40s' });

      const policies = await engine.database.rows<{ n: number }>(
        sql`SELECT count(*)::int AS n FROM ${n.policies}`,
      );
      expect(policies[0]?.n).toBe(2);
      const steps = await engine.database.rows<StepOptions>(sql`
        SELECT s.run_id::text, s.policy_id::text, s.max_attempts, p.lease_ms, p.start_to_close_timeout_ms,
               p.retry_policy, ${n.policyId}(p.retry_policy, p.lease_ms, p.start_to_close_timeout_ms)::text AS key_of_content
          FROM ${n.steps} s JOIN ${n.policies} p ON p.id = s.policy_id`);
      expect(steps).toHaveLength(4);
      const byRun = new Map(steps.map((s) => [s.run_id, s]));
      for (const s of steps) {
        expect(s.policy_id).toBe(s.key_of_content);
        expect(s.max_attempts).toBe(RETRY.maximumAttempts);
        expect(s.start_to_close_timeout_ms).toBe(60_000);
        expect(s.retry_policy).toMatchObject(RETRY);
      }
      expect(new Set(same.map((h) => byRun.get(h.runId)?.policy_id)).size).toBe(1);
      expect(byRun.get(same[0]!.runId)?.lease_ms).toBe(20_000);
      expect(byRun.get(longer.runId)?.lease_ms).toBe(40_000);
      expect(byRun.get(longer.runId)?.policy_id).not.toBe(byRun.get(same[0]!.runId)?.policy_id);

      // The claim hands the worker the options of the step's policy, and grants the lease they say.
      const claimed = await claimSteps(engine.database, n, {
        workerId: 'policies-test',
        claimRequestId: randomUUID(),
        queues: ['default'],
        activityNames: [job.name],
        limit: 10,
      });
      expect(claimed).toHaveLength(4);
      for (const row of claimed) {
        const lease = row.run_id === longer.runId ? 40_000 : 20_000;
        expect(row).toMatchObject({ lease_ms: lease, start_to_close_timeout_ms: 60_000 });
        expect(row.retry_policy).toEqual(byRun.get(row.run_id)?.retry_policy);
        expect(row.remaining_ms).toBeGreaterThan(lease - 5_000);
        expect(row.remaining_ms).toBeLessThanOrEqual(lease);
      }
    });

    it('keys an option set by its content: the same policy written in another key order has the same key', async () => {
      const engine = await target.engine();
      const key = (policy: string, leaseMs: number, timeoutMs: number) =>
        engine.database
          .rows<{ id: string }>(
            sql`SELECT ${engine.names.policyId}(${policy}::jsonb, ${leaseMs}::int, ${timeoutMs}::int)::text AS id`,
          )
          .then((rows) => rows[0]?.id);
      const a = await key('{"maximumAttempts": 3, "jitter": 0.2}', 1_000, 2_000);
      expect(a).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
      expect(await key('{"jitter":0.2,"maximumAttempts":3}', 1_000, 2_000)).toBe(a);
      expect(await key('{"maximumAttempts": 3, "jitter": 0.2}', 1_000, 2_001)).not.toBe(a);
      expect(await key('{"maximumAttempts": 3, "jitter": 0.2}', 1_001, 2_000)).not.toBe(a);
      expect(await key('{"maximumAttempts": 4, "jitter": 0.2}', 1_000, 2_000)).not.toBe(a);
    });
  });
}
