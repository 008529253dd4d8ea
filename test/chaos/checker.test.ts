/**
 * The chaos checker must be able to fail: on a real engine schema with the audit trigger and effects table
 * installed, one clean step passes, and each planted violation (rows written as a buggy engine or a zombie
 * would) is counted by the check it belongs to.
 */
import { randomBytes } from 'node:crypto';
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import type { ChildMessage } from '../fixtures/worker-protocol.js';
import { useTestDatabase } from '../support/postgres.js';
import { auditDdl } from './audit.js';
import { chaosActivity, effectsTableDdl } from './chaos-activity.js';
import { checkScenario, type CheckName } from './checker.js';

describe('chaos checker', () => {
  const url = useTestDatabase();
  let sql: postgres.Sql;
  const engines: Engine[] = [];
  beforeAll(() => {
    sql = postgres(url(), { max: 2, onnotice: () => undefined });
  });
  afterAll(async () => {
    await Promise.all(engines.map((e) => e.close({ graceMs: 0 })));
    await sql.end({ timeout: 5 });
  });

  /** A schema with one step claimed (token t1, lease 2 s), 3 fenced + 3 unfenced effects, then completed. */
  async function cleanStep(): Promise<{ schema: string; stepId: string; runId: string; t1: string }> {
    const { schema, stepId, runId, t1 } = await claimedStep();
    const s = `"${schema}"`;
    await sql.unsafe(`UPDATE ${s}.steps SET status = 'completed' WHERE id = $1`, [stepId]);
    await sql.unsafe(`UPDATE ${s}.runs SET status = 'completed' WHERE id = $1`, [runId]);
    return { schema, stepId, runId, t1 };
  }

  /** A schema with one step claimed by w1 (token t1, lease 2 s) and 3 fenced + 3 unfenced effects, still running. */
  async function claimedStep(): Promise<{
    schema: string;
    stepId: string;
    runId: string;
    t1: string;
    engine: Engine;
  }> {
    const schema = `chk_${randomBytes(4).toString('hex')}`;
    const engine = await createEngine({ databaseUrl: url(), schema });
    engines.push(engine);
    await sql.unsafe(effectsTableDdl(schema) + auditDdl(schema));
    const handle = await engine.client.enqueue(chaosActivity({ leaseMs: 2_000 }), { iterations: 1 });
    const s = `"${schema}"`;
    const [step] = await sql.unsafe<{ id: string; token: string }[]>(
      `UPDATE ${s}.steps SET status = 'running', fencing_token = nextval('${s}.fencing_token_seq'),
              nonce = gen_random_uuid(), worker_id = 'w1', attempt = 1, epoch = 1,
              lease_expires_at = ${s}.now() + interval '2 s'
        WHERE run_id = $1 RETURNING id::text, fencing_token::text AS token`,
      [handle.runId],
    );
    if (!step) throw new Error('no step');
    for (let seq = 0; seq < 3; seq++) await effect(schema, handle.runId, step.id, step.token, seq, true);
    for (let seq = 0; seq < 3; seq++) await effect(schema, handle.runId, step.id, step.token, seq, false);
    return { schema, stepId: step.id, runId: handle.runId, t1: step.token, engine };
  }

  /** Reclaim the running step for `workerId` under a new token with a 2 s lease, as a claim would. */
  async function grant(schema: string, stepId: string, workerId: string): Promise<string> {
    const s = `"${schema}"`;
    const [row] = await sql.unsafe<{ token: string }[]>(
      `UPDATE ${s}.steps SET fencing_token = nextval('${s}.fencing_token_seq'), nonce = gen_random_uuid(),
              worker_id = $2, lease_expires_at = ${s}.now() + interval '2 s'
        WHERE id = $1 RETURNING fencing_token::text AS token`,
      [stepId, workerId],
    );
    if (!row) throw new Error('no step');
    return row.token;
  }

  async function effect(
    schema: string,
    runId: string,
    stepId: string,
    token: string,
    seq: number,
    fenced: boolean,
  ) {
    await sql.unsafe(
      `INSERT INTO "${schema}".effects (run_id, step_id, fencing_token, worker_id, seq, fenced)
       VALUES ($1, $2, $3::bigint, 'w1', $4, $5)`,
      [runId, stepId, token, seq, fenced],
    );
  }

  const nonZero = (v: Record<CheckName, number>) => Object.entries(v).filter(([, n]) => n > 0);

  it('passes a clean step and counts what it looked at', async () => {
    const { schema } = await cleanStep();
    const result = await checkScenario(sql, schema, []);
    expect(nonZero(result.violations)).toEqual([]);
    expect(result).toMatchObject({ steps: 1, runs: 1, fencedEffects: 3, unfencedByZombies: 0 });
    expect(result.grantsPerStep).toEqual([1]);
  });

  it('counts a grant inside the previous live lease as C-overlap', async () => {
    const { schema, stepId } = await cleanStep();
    const s = `"${schema}"`;
    // A second claim while token 1's lease (2 s) is still live: back to running under a new token.
    await sql.unsafe(`UPDATE ${s}.steps SET status = 'running' WHERE id = $1`, [stepId]);
    await sql.unsafe(
      `UPDATE ${s}.steps SET fencing_token = nextval('${s}.fencing_token_seq'), worker_id = 'w2' WHERE id = $1`,
      [stepId],
    );
    // (planted on a completed step, so C-terminal sees it leave 'completed' too)
    const result = await checkScenario(sql, schema, []);
    expect(result.violations.terminal).toBeGreaterThan(0);
    const { schema: schema2, stepId: step2 } = await cleanStep();
    const s2 = `"${schema2}"`;
    await sql.unsafe(`DELETE FROM ${s2}.audit WHERE status = 'completed'`);
    await sql.unsafe(`ALTER TABLE ${s2}.steps DISABLE TRIGGER USER`);
    await sql.unsafe(`UPDATE ${s2}.steps SET status = 'running' WHERE id = $1`, [step2]);
    await sql.unsafe(`ALTER TABLE ${s2}.steps ENABLE TRIGGER USER`);
    await sql.unsafe(
      `UPDATE ${s2}.steps SET fencing_token = nextval('${s2}.fencing_token_seq'), worker_id = 'w2',
              lease_expires_at = ${s2}.now() + interval '2 s' WHERE id = $1`,
      [step2],
    );
    const overlap = await checkScenario(sql, schema2, []);
    expect(overlap.violations.overlap).toBe(1);
  });

  it('counts a lease renewed after it expired as C-overlap', async () => {
    const { schema, stepId } = await cleanStep();
    const s = `"${schema}"`;
    // While still running (the completion's audit row removed), a heartbeat 10 s after the 2 s lease expired.
    await sql.unsafe(`DELETE FROM ${s}.audit WHERE status = 'completed'`);
    await sql.unsafe(
      `INSERT INTO ${s}.audit (step_id, run_id, op, fencing_token, status, worker_id, lease_expires_at, at,
                               engine_at)
       SELECT id, run_id, 'update', fencing_token, 'running', worker_id, ${s}.now() + interval '1 h',
              clock_timestamp() + interval '10 s', ${s}.now() + interval '10 s'
         FROM ${s}.steps WHERE id = $1`,
      [stepId],
    );
    const result = await checkScenario(sql, schema, []);
    expect(result.violations.overlap).toBeGreaterThan(0);
  });

  it('judges a renewal by when the heartbeat decided it, not by when its row trigger ran', async () => {
    // The trigger of a renewal fires at the end of its statement, 30 ms after the 2 s lease ran out on a loaded
    // machine; the heartbeat read its clock (last_heartbeat_at) 10 ms before the expiry: not an overlap.
    const inTime = await cleanStep();
    const s = `"${inTime.schema}"`;
    const renewal = (decidedMs: number): string =>
      `INSERT INTO ${s}.audit (step_id, run_id, op, fencing_token, status, worker_id, lease_expires_at, at,
                               engine_at, heartbeat_at)
       SELECT id, run_id, 'update', fencing_token, 'running', worker_id, ${s}.now() + interval '1 h',
              clock_timestamp() + interval '2030 ms', a.lease_expires_at + interval '30 ms',
              a.lease_expires_at + ${decidedMs} * interval '1 ms'
         FROM ${s}.steps,
              LATERAL (SELECT lease_expires_at FROM ${s}.audit WHERE step_id = $1 ORDER BY id LIMIT 1 OFFSET 1) a
        WHERE id = $1`;
    await sql.unsafe(`DELETE FROM ${s}.audit WHERE status = 'completed'`);
    await sql.unsafe(renewal(-10), [inTime.stepId]);
    expect((await checkScenario(sql, inTime.schema, [])).violations.overlap).toBe(0);
    // Decided 10 ms after the expiry: a revived lease.
    await sql.unsafe(`DELETE FROM ${s}.audit WHERE heartbeat_at IS NOT NULL`);
    await sql.unsafe(renewal(10), [inTime.stepId]);
    expect((await checkScenario(sql, inTime.schema, [])).violations.overlap).toBe(1);
  });

  it('judges leases in engine time: a reclaim after a DB clock jump is legitimate, a grant inside the lease is not', async () => {
    // Token t1 (lease 2 s, engine time); the engine's clock jumps 1 h forward, so t1's lease has expired in
    // engine time although hardly any host time passed; w2 reclaims. Not an overlap.
    const jumped = await claimedStep();
    await advanceClock(jumped.engine, 3_600_000);
    // After the jump t1 is a zombie: its unfenced write counts as exposure, its fenced write attempt (client
    // history, host clock) is stale and was rejected.
    await effect(jumped.schema, jumped.runId, jumped.stepId, jumped.t1, 5, false);
    const t2 = await grant(jumped.schema, jumped.stepId, 'w2');
    await effect(jumped.schema, jumped.runId, jumped.stepId, t2, 0, true);
    const s = `"${jumped.schema}"`;
    await sql.unsafe(`UPDATE ${s}.steps SET status = 'completed' WHERE id = $1`, [jumped.stepId]);
    await sql.unsafe(`UPDATE ${s}.runs SET status = 'completed' WHERE id = $1`, [jumped.runId]);
    const staleAttempt = { runId: jumped.runId, stepId: jumped.stepId, attempt: 1, token: jumped.t1 };
    const op = {
      type: 'chaos:op',
      op: 'fenced-write',
      seq: 6,
      attempt: staleAttempt,
      workerId: 'w1',
      pid: 1,
    };
    const history = [
      { ...op, phase: 'invoke', wallMs: Date.now() },
      { ...op, phase: 'fail', wallMs: Date.now() },
    ] as ChildMessage[];
    const legit = await checkScenario(sql, jumped.schema, history);
    expect(nonZero(legit.violations)).toEqual([]);
    expect(legit.grantsPerStep).toEqual([2]);
    expect(legit.unfencedByZombies).toBe(1);
    expect([legit.staleAttempted, legit.staleRejected]).toEqual([1, 1]);

    // A jump shorter than the lease (1 s of 2 s) leaves t1 live in engine time: a grant now overlaps.
    const short = await claimedStep();
    await advanceClock(short.engine, 1_000);
    await grant(short.schema, short.stepId, 'w2');
    const overlap = await checkScenario(sql, short.schema, []);
    expect(overlap.violations.overlap).toBe(1);
  });

  it('counts a lower or reused token as C-mono', async () => {
    const { schema, stepId, t1 } = await cleanStep();
    const s = `"${schema}"`;
    await sql.unsafe(
      `INSERT INTO ${s}.audit (step_id, run_id, op, fencing_token, status, worker_id, lease_expires_at, at)
       SELECT id, run_id, 'update', $2::bigint - 1, 'scheduled', worker_id, NULL, clock_timestamp() + interval '1 h'
         FROM ${s}.steps WHERE id = $1`,
      [stepId, t1],
    );
    const result = await checkScenario(sql, schema, []);
    expect(result.violations.mono).toBeGreaterThan(0);
  });

  it('counts a fenced effect after supersession, or under a token never granted, as C-stale-fenced', async () => {
    const { schema, stepId, runId, t1 } = await cleanStep();
    // Under a token never granted for the step:
    await effect(schema, runId, stepId, String(BigInt(t1) + 100n), 9, true);
    // Under t1, but 1 h after its lease expired:
    await sql.unsafe(
      `INSERT INTO "${schema}".effects (run_id, step_id, fencing_token, worker_id, seq, fenced, db_time, engine_time)
       VALUES ($1, $2, $3::bigint, 'w1', 10, true, clock_timestamp() + interval '1 h',
               "${schema}".now() + interval '1 h')`,
      [runId, stepId, t1],
    );
    const result = await checkScenario(sql, schema, []);
    expect(result.violations.staleFenced).toBe(2);
  });

  it('judges resource fences by unit of work: a lower token accepted after a higher one, under any scope string', async () => {
    const { schema, stepId, runId, t1 } = await claimedStep();
    const s = `"${schema}"`;
    // A retry retires the step under its holder and re-creates the position as a new row, granted a higher token.
    await sql.unsafe(`UPDATE ${s}.steps SET status = 'cancelled', retired_at = now() WHERE id = $1`, [
      stepId,
    ]);
    const [next] = await sql.unsafe<{ id: string; token: string }[]>(
      `INSERT INTO ${s}.steps (run_id, seq, kind, name, fencing_scope, status, queue, policy_id, max_attempts,
                               fencing_token, nonce, worker_id, attempt, epoch, lease_expires_at)
       SELECT run_id, seq, kind, name, fencing_scope, 'running', queue, policy_id, max_attempts,
              nextval('${s}.fencing_token_seq'), gen_random_uuid(), 'w2', 1, 2,
              ${s}.now() + interval '2 s'
         FROM ${s}.steps WHERE id = $1
       RETURNING id::text, fencing_token::text AS token`,
      [stepId],
    );
    const resourceEffect = (step: string, token: string, seq: number, scope: string) =>
      sql.unsafe(
        `INSERT INTO ${s}.effects (run_id, step_id, fencing_token, worker_id, seq, fenced, via, step_seq, scope)
         VALUES ($1, $2, $3::bigint, 'w', $4, true, 'resource', 0, $5)`,
        [runId, step, token, seq, scope],
      );
    // The successor writes; then the holder of the retired row writes under a scope of its own (the old bug).
    await resourceEffect(next!.id, next!.token, 0, 'step:new');
    await resourceEffect(stepId, t1, 1, 'step:old');
    const result = await checkScenario(sql, schema, []);
    expect(result.violations.staleFenced).toBe(1);
    // The re-created row was granted while the retired row's holder was live (its lease was kept): an overlap.
    expect(result.violations.overlap).toBe(1);
  });

  it('counts unfenced effects after the lease as zombie writes, without a violation', async () => {
    const { schema, stepId, runId, t1 } = await cleanStep();
    await sql.unsafe(
      `INSERT INTO "${schema}".effects (run_id, step_id, fencing_token, worker_id, seq, fenced, db_time, engine_time)
       VALUES ($1, $2, $3::bigint, 'w1', 10, false, clock_timestamp() + interval '1 h',
               "${schema}".now() + interval '1 h')`,
      [runId, stepId, t1],
    );
    const result = await checkScenario(sql, schema, []);
    expect(result.unfencedByZombies).toBe(1);
    expect(nonZero(result.violations)).toEqual([]);
  });

  it('counts two terminal outcomes, a step never ended and a run left running', async () => {
    const { schema, stepId, runId } = await cleanStep();
    const s = `"${schema}"`;
    await sql.unsafe(
      `INSERT INTO ${s}.audit (step_id, run_id, op, fencing_token, status, worker_id, at)
       SELECT id, run_id, 'update', fencing_token, 'scheduled', worker_id, clock_timestamp() FROM ${s}.steps WHERE id = $1;`,
      [stepId],
    );
    await sql.unsafe(
      `INSERT INTO ${s}.audit (step_id, run_id, op, fencing_token, status, worker_id, at)
       SELECT id, run_id, 'update', fencing_token, 'failed', worker_id, clock_timestamp() FROM ${s}.steps WHERE id = $1`,
      [stepId],
    );
    await sql.unsafe(`UPDATE ${s}.runs SET status = 'running' WHERE id = $1`, [runId]);
    const result = await checkScenario(sql, schema, []);
    expect(result.violations.terminal).toBeGreaterThanOrEqual(2); // left 'completed', then 2 terminal outcomes
    expect(result.violations.lost).toBe(1);
  });

  it('counts an acknowledged completion missing from the DB (C-ack) and a stale write not rejected (C-reject)', async () => {
    const { schema, stepId, runId, t1 } = await cleanStep();
    const attempt = { runId, stepId, attempt: 2, token: String(BigInt(t1) + 1n) };
    const base = { workerId: 'w2', pid: 1 };
    const staleAttempt = { runId, stepId, attempt: 1, token: t1 };
    const later = Date.now() + 3_600_000; // after t1's lease expired
    /** One phase of fenced write `seq` by the stale attempt, after its lease expired. */
    const staleWrite = (phase: 'invoke' | 'ok' | 'fail', seq: number): ChildMessage => ({
      type: 'chaos:op',
      op: 'fenced-write',
      phase,
      seq,
      attempt: staleAttempt,
      ...base,
      wallMs: later,
    });
    const history: ChildMessage[] = [
      { type: 'attempt:completed', attempt, ...base, wallMs: Date.now() },
      staleWrite('invoke', 7),
      staleWrite('ok', 7),
      staleWrite('invoke', 8),
      staleWrite('fail', 8),
    ];
    const result = await checkScenario(sql, schema, history);
    expect(result.violations.ack).toBe(1);
    expect(result.violations.reject).toBe(1);
    expect([result.staleAttempted, result.staleRejected]).toEqual([2, 1]);
  });
});
