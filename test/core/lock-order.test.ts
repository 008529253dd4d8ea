/**
 * One lock order (DESIGN.md §4 invariant 14) and "ending a run ends all of it" (invariant 12), on PostgreSQL.
 *
 * - A sibling's claim held open at COMMIT while the run's final turn commits: the run's end waits for it and
 *   then cancels the step the claim took, and the claim's holder is refused and signalled at its next heartbeat.
 * - A cancel that waited for the run row while a turn's commit held it and added a step: the cancel locks that
 *   step by id with the others, in a statement begun once the run row is held, so a heartbeat locking the same
 *   steps by id waits behind it instead of closing a cycle.
 * - A minute of heartbeats, claims, completions, fenced writes, rejections, cancels, retries and run endings on
 *   the same runs, from three workers: not one deadlock (pg_stat_database), and every cancel applied.
 *
 * PostgreSQL only: PGlite runs one transaction at a time, so neither a held claim nor a lock cycle can exist there.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type postgres from '@palisade/engine/postgres';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, LeaseLostError, defineActivity, defineWorkflow } from '@palisade/sdk';
import type { Engine, RunHandle } from '@palisade/engine';
import { setFaultHook, unsafeTestTimings } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { readyMismatches } from '../support/ready-set.js';
import { gate, recordingLogger } from '../worker/helpers.js';
import { rejectionOf } from '../support/rejections.js';
import { holdActivity } from './held-activity.js';
import { pollFor } from '../support/wait.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { oneStepWorkflow } from '../fixtures/one-step-workflow.js';

const STRESS_MS = Number(process.env.STRESS_MS ?? 60_000);

describe('one lock order on postgres', () => {
  const target = useEngineTarget('postgres');

  it('cancels a sibling whose claim commits under the run’s final turn, and signals its holder', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const fast = emptyActivity('fast');
    const sibling = holdActivity('sibling', { leaseMs: 5 * 60_000 });
    const endsEarly = noInputWorkflow('ends-early', z.object({ done: z.boolean() }), async (ctx) => {
      // The sibling is scheduled with `fast` but never awaited: the run ends while it may still be running.
      ctx.run(sibling.activity, {}).catch(() => undefined);
      await ctx.run(fast, {});
      return { done: true };
    });

    const claimHeld = gate();
    const releaseClaim = gate();
    setFaultHook('claim:before-commit', async (claimed) => {
      if (!claimed.some((c) => c.name === 'sibling')) return;
      claimHeld.open();
      await releaseClaim.promise;
    });
    try {
      const turns = workerFor(engine, [endsEarly], { pollIntervalMs: 50 });
      const siblingWorker = workerFor(engine, [sibling.activity], { pollIntervalMs: 50 });
      await Promise.all([turns.start(), siblingWorker.start()]);
      const handle = await engine.client.start(endsEarly, {});
      await claimHeld.promise;
      // Only now may `fast` run and the final turn commit, while the sibling's claim sits uncommitted.
      await startWorker(engine, [fast], { pollIntervalMs: 50 });
      await pollFor('the final turn to wait on the uncommitted claim', async () => {
        const [row] = await admin<{ pid: number }[]>`
          SELECT pid FROM pg_stat_activity
           WHERE datname = current_database() AND application_name = 'palisade'
             AND cardinality(pg_blocking_pids(pid)) > 0 AND query LIKE '%r.turn_nonce, r.turn_lease_expires_at%'`;
        return row;
      });
      releaseClaim.open();

      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ done: true });
      const holder = await sibling.next();
      const steps = await admin<{ name: string; status: string }[]>`
        SELECT name, status FROM ${admin(engine.schema)}.steps WHERE run_id = ${handle.runId} ORDER BY seq`;
      expect(steps).toEqual([
        { name: 'sibling', status: 'cancelled' },
        { name: 'fast', status: 'completed' },
      ]);
      const error = await rejectionOf(holder.ctx.heartbeat());
      expect(error).toBeInstanceOf(LeaseLostError);
      expect(error).toMatchObject({ reason: 'cancelled' });
      expect(holder.ctx.signal.aborted).toBe(true);
      expect((holder.ctx.signal.reason as { reason?: string }).reason).toBe('cancelled');
    } finally {
      setFaultHook('claim:before-commit', undefined);
      releaseClaim.open();
    }
  });

  it('locks in id order, with the rest, the steps a turn added while a cancel waited for the run row', async () => {
    const engine = await target.engine();
    const admin = target.sql();
    const schema = engine.schema;
    const waits = emptyActivity('waits');
    const oneStep = oneStepWorkflow('one-step', waits);
    // A turn worker only: the activity stays scheduled, nobody claims it.
    const turns = await startWorker(engine, [oneStep], { pollIntervalMs: 20 });
    const handle = await engine.client.start(oneStep, {});
    const [old] = await pollFor('the first turn to schedule its step', async () => {
      const rows = await admin<{ id: string; seq: number }[]>`
        SELECT id::text, seq FROM ${admin(schema)}.steps WHERE run_id = ${handle.runId}`;
      return rows.length === 1 ? rows : undefined;
    });
    await turns.stop();
    const newId = '00000000-0000-4000-8000-000000000000'; // sorts before every random (v4) id
    const columns = (
      await admin<{ name: string }[]>`
        SELECT column_name AS name FROM information_schema.columns
         WHERE table_schema = ${schema} AND table_name = 'steps' AND is_generated = 'NEVER'
           AND column_name NOT IN ('id', 'seq', 'fencing_scope')`
    ).map((r) => `"${r.name}"`);

    /**
     * A transaction on a connection of its own: `first` runs at once, `then` once `go()` is called, and it
     * commits after that. `pid` is its backend.
     */
    const hold = (
      first: (tx: postgres.TransactionSql) => Promise<unknown>,
      then: (tx: postgres.TransactionSql) => Promise<unknown> = () => Promise.resolve(),
    ) => {
      const pid = gate<number>();
      const go = gate();
      const done = admin.begin(async (tx) => {
        const [row] = await tx<{ pid: number }[]>`SELECT pg_backend_pid() AS pid`;
        pid.open(row!.pid);
        await first(tx);
        await go.promise;
        await then(tx);
      });
      return { pid: pid.promise, go: () => go.open(), done };
    };
    /** A backend that waits for a lock `blocker` holds. */
    const blockedBy = (what: string, blocker: number) =>
      pollFor(what, async () => {
        const [row] = await admin<{ pid: number }[]>`
          SELECT pid FROM pg_stat_activity
           WHERE datname = current_database() AND ${blocker} = ANY(pg_blocking_pids(pid))`;
        return row;
      });

    // C holds the old step. A holds the run row, as a turn's commit does, and then adds a step to the run.
    const c = hold((tx) => tx`SELECT 1 FROM ${tx(schema)}.steps WHERE id = ${old!.id} FOR NO KEY UPDATE`);
    const cPid = await c.pid;
    const a = hold(
      (tx) => tx`SELECT 1 FROM ${tx(schema)}.runs WHERE id = ${handle.runId} FOR NO KEY UPDATE`,
      (tx) =>
        tx.unsafe(
          `INSERT INTO "${schema}".steps (id, seq, fencing_scope, ${columns.join(', ')})
           SELECT $1::uuid, seq + 1, fencing_scope || '+', ${columns.join(', ')}
             FROM "${schema}".steps WHERE id = $2::uuid`,
          [newId, old!.id],
        ),
    );
    const aPid = await a.pid;
    const cancelled = handle.cancel('lock order');
    await blockedBy('the cancel to wait for the run row', aPid);
    a.go();
    await a.done;
    // The cancel now waits for the old step, which C holds.
    await blockedBy('the cancel to wait for the old step', cPid);
    // B locks both steps by id, as a heartbeat does: the new one first.
    const b = hold(
      (tx) =>
        tx`SELECT 1 FROM ${tx(schema)}.steps WHERE id IN (${newId}, ${old!.id}) ORDER BY id FOR NO KEY UPDATE`,
    );
    const bPid = await b.pid;
    await pollFor('B to wait for a lock', async () => {
      const [row] = await admin<{ n: number }[]>`SELECT cardinality(pg_blocking_pids(${bPid}))::int AS n`;
      return row && row.n > 0 ? true : undefined;
    });
    b.go();
    c.go();
    await c.done;

    // No lock cycle: B is not aborted as a deadlock victim, and the cancel ended both steps.
    await expect(b.done).resolves.toBeUndefined();
    await expect(cancelled).resolves.toBe('running');
    const steps = await admin<{ id: string; status: string }[]>`
      SELECT id::text, status FROM ${admin(schema)}.steps WHERE run_id = ${handle.runId} ORDER BY id`;
    expect(steps).toEqual([
      { id: newId, status: 'cancelled' },
      { id: old!.id, status: 'cancelled' },
    ]);
  });

  it('runs a minute of claims, heartbeats, completions, rejections, cancels, retries and run endings without a deadlock', async () => {
    const admin = target.sql();
    const deadlocksBefore = await deadlocks(admin);
    const { logger, records } = recordingLogger();

    /** Heartbeats and fenced writes in a loop; keeps going after it lost its lease (a zombie), when told to. */
    const busy = defineActivity({
      name: 'busy',
      input: z.object({ ms: z.number(), zombie: z.boolean(), fail: z.boolean() }),
      output: z.object({}),
      leaseMs: 1_500,
      retry: { maximumAttempts: 3, initialIntervalMs: 10 },
      async run(input, ctx) {
        const until = performance.now() + input.ms;
        while (performance.now() < until) {
          for (const write of [
            () => ctx.heartbeat({ at: Date.now() }),
            () => ctx.fencedTransaction(() => Promise.resolve(1)),
          ]) {
            try {
              await write();
            } catch (error) {
              if (!input.zombie) throw error;
            }
          }
          await sleep(5);
        }
        if (input.fail) throw new ApplicationFailure('failed on purpose', { nonRetryable: true });
        return {};
      },
    });
    /** Four activities in parallel; the run ends after the first two, while the others may still run. */
    const fanout = defineWorkflow({
      name: 'fanout',
      input: z.object({ seed: z.number() }),
      output: z.object({}),
      async run({ seed }, ctx) {
        const calls = [0, 1, 2, 3].map((i) =>
          ctx.run(busy, { ms: 20 + ((seed * 7 + i * 13) % 5) * 40, zombie: i >= 2, fail: seed % 9 === i }),
        );
        for (const call of calls) call.catch(() => undefined); // awaited below, or left to run past the end
        await calls[0];
        await calls[1];
        return {};
      },
    });

    const engines: Engine[] = [];
    for (let i = 0; i < 3; i++) {
      const engine = await target.engine({ logger, ...(engines[0] ? { schema: engines[0].schema } : {}) });
      engines.push(engine);
      const worker = engine.worker(
        unsafeTestTimings({
          workflows: [fanout],
          activities: [busy],
          pollIntervalMs: 20,
          heartbeatIntervalMs: 300,
          concurrency: 8,
        }),
      );
      await worker.start();
    }
    const client = engines[0]!.client;

    const runs: { handle: RunHandle<unknown>; cancelled?: string }[] = [];
    const settled: Promise<void>[] = [];
    let inFlight = 0;
    const endAt = performance.now() + STRESS_MS;
    for (let seed = 0; performance.now() < endAt; seed++) {
      while (inFlight >= 40) await sleep(20);
      const handle = await client.start(fanout, { seed });
      const entry: (typeof runs)[number] = { handle };
      runs.push(entry);
      inFlight++;
      settled.push(
        (async () => {
          try {
            if (seed % 4 === 0) {
              await sleep(seed % 7);
              entry.cancelled = await handle.cancel('stress');
            }
            const failed = await handle.result({ timeoutMs: 60_000 }).then(
              () => false,
              () => true,
            );
            // A failed run (never one this test cancelled) is retried once: its steps are reset or retired
            // and scheduled again while the workers are busy with everything else.
            if (failed && entry.cancelled === undefined && seed % 2 === 0) {
              await client.retry(handle.runId);
              await handle.result({ timeoutMs: 60_000 }).catch(() => undefined);
            }
          } finally {
            inFlight--;
          }
        })(),
      );
      await sleep(5);
    }
    const outcomes = await Promise.allSettled(settled);
    expect(outcomes.filter((o) => o.status === 'rejected')).toEqual([]);

    // Every cancel was applied: a run cancelled before it ended is recorded as such and ended cancelled (at once,
    // `cancelled`, when no turn of it had begun; nothing else ends a run cancelled here).
    const cancelledEarly = runs.filter((r) =>
      ['pending', 'running', 'cancelled'].includes(r.cancelled ?? ''),
    );
    expect(cancelledEarly.length).toBeGreaterThan(10);
    for (const r of cancelledEarly) {
      const { run, events } = await r.handle.describe();
      expect([r.handle.runId, run.status]).toEqual([r.handle.runId, 'cancelled']);
      expect(events.map((e) => e.type)).toContain('run:cancel-requested');
    }
    const schema = engines[0]!.schema;
    const [liveRow] = await admin<{ live: number }[]>`
      SELECT count(*)::int AS live FROM ${admin(schema)}.steps s JOIN ${admin(schema)}.runs r ON r.id = s.run_id
       WHERE s.status IN ('scheduled', 'running') AND r.status NOT IN ('pending', 'running')`;
    expect(liveRow?.live).toBe(0);
    expect(runs.length).toBeGreaterThan(100);
    const [rejectedRow] = await admin<{ rejected: number }[]>`
      SELECT count(*)::int AS rejected FROM ${admin(schema)}.events WHERE type = 'attempt:stale-rejected'`;
    expect(rejectedRow?.rejected).toBeGreaterThan(0);
    // Every claim, heartbeat, completion, failure, retry, cancel and run ending above kept the claimable set in
    // step: one ready row per claimable step, none for any other (migration 0024).
    expect(await readyMismatches(engines[0]!)).toEqual([]);

    // Deadlocks are counted by the backend that found them and flushed to the statistics when it exits: close
    // every connection, wait until those backends are gone, then read the database's counter.
    await Promise.all(engines.map((e) => e.close({ graceMs: 0 })));
    await pollFor('the engines’ backends to exit', async () => {
      const [row] = await admin<{ n: number }[]>`
        SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'palisade'`;
      return row?.n === 0 ? true : undefined;
    });
    expect(await deadlocks(admin)).toBe(deadlocksBefore);
    expect(records.filter((r) => JSON.stringify(r).includes('40P01'))).toEqual([]);
  });
});

async function deadlocks(admin: postgres.Sql): Promise<number> {
  await admin`SELECT pg_stat_clear_snapshot()`;
  const [row] = await admin<{ deadlocks: number }[]>`
    SELECT deadlocks::int FROM pg_stat_database WHERE datname = current_database()`;
  return row?.deadlocks ?? -1;
}
