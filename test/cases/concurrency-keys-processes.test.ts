/**
 * Issue 14: per-key concurrency under several worker processes. 1,000 runs of `keyed-job` over 10 tenants, each
 * tenant's runs enqueued with `concurrency: { key: tenant, limit: 2 }`, served by three worker processes of 8
 * slots each (24 slots for 20 places). A sampler reads the steps table while they run, and the audit afterwards
 * reads every attempt's claim and end (database clock) from the attempts table: never more than 2 running per
 * tenant, all 1,000 complete, each once. That some tenant did run 2 at once shows the limit is a limit, not a
 * serialization.
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { keyedJob } from '../fixtures/flow-control-definitions.js';
import type { FixtureTimings } from '../fixtures/worker-protocol.js';
import { maxRunningPerKey, runningNowPerKey } from '../support/flow-audit.js';
import { heartbeatEvery, useProcessCase } from '../support/process-case.js';

const timings: FixtureTimings = { leaseMs: 5_000 };
const EXTENSION = fileURLToPath(new URL('../fixtures/flow-control-definitions.ts', import.meta.url));
const TENANTS = 10;
const PER_TENANT = 100;
const LIMIT = 2;

describe('issue 14: per-key concurrency across worker processes', () => {
  const { workers, faults, config } = useProcessCase({
    timings,
    ...heartbeatEvery(1_000),
    pollIntervalMs: 200,
    concurrency: 8,
    // A small pool each: files run three at a time, and one of them may hold 64 connections (claim-race).
    poolSize: 4,
    extensionModule: EXTENSION,
  });

  it('never runs more than the limit of a key at once across three processes, and completes every run once', async () => {
    const c = await faults.setUp();
    const job = keyedJob(timings);
    const handles = [];
    for (let t = 0; t < TENANTS; t++) {
      const tenant = `tenant-${t}`;
      handles.push(
        ...(await c.engine.client.enqueueMany(
          job,
          Array.from({ length: PER_TENANT }, (_, n) => ({ tenant, n, ms: 5 + ((n * 7) % 11) })),
          { concurrency: { key: tenant, limit: LIMIT } },
        )),
      );
    }
    const processes = await Promise.all(['w1', 'w2', 'w3'].map((id) => workers.spawn(config(c, id))));
    // Sample the steps table while the runs drain (its own reads; the audit below is the proof).
    let sampling = true;
    let mostSampled = 0;
    const sampler = (async () => {
      while (sampling) {
        const now = await runningNowPerKey(c.engine, 'keyed-job');
        mostSampled = Math.max(mostSampled, ...Object.values(now), 0);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const outputs = await Promise.all(handles.map((h) => h.result({ timeoutMs: 120_000 })));
    sampling = false;
    await sampler;
    expect(new Set(outputs).size).toBe(TENANTS * PER_TENANT);
    const most = await maxRunningPerKey(c.engine, 'keyed-job');
    expect(Object.keys(most)).toHaveLength(TENANTS);
    for (const [tenant, n] of Object.entries(most)) expect(n, tenant).toBeLessThanOrEqual(LIMIT);
    expect(Math.max(...Object.values(most))).toBe(LIMIT);
    expect(mostSampled).toBeLessThanOrEqual(LIMIT);
    // Each run completed by exactly one attempt: none ran twice.
    const [attempts] = await c.sql<{ n: number; completed: number }[]>`
      SELECT count(*)::int AS n, count(*) FILTER (WHERE outcome = 'completed')::int AS completed
        FROM ${c.sql(c.schema)}.attempts WHERE kind = 'activity'`;
    expect(attempts).toEqual({ n: TENANTS * PER_TENANT, completed: TENANTS * PER_TENANT });
    // Every process took part.
    for (const p of processes) expect(p.all('attempt:completed').length, p.workerId).toBeGreaterThan(0);
  });
});
