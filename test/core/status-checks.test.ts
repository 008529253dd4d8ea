/**
 * Migration 0021 (issue 27): the status and kind columns take only the values of the engine's state machines
 * (turn/state-machine.ts). It must apply to a schema holding rows an earlier version wrote, with every value
 * that version could write, and from then on refuse a value no machine has.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadMigrations, migrate } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { rejectionOf, sqlState } from './engine-rows.js';

const RUN_KINDS = ['workflow', 'activity'];
const RUN_STATUSES = ['pending', 'running', 'completed', 'failed', 'cancelled'];
const STEP_KINDS = ['activity', 'timer', 'signal', 'child', 'value'];
const STEP_STATUSES = ['scheduled', 'running', 'completed', 'failed', 'cancelled'];
const ATTEMPT_KINDS = ['activity', 'turn'];
const ATTEMPT_OUTCOMES = [
  null,
  'completed',
  'failed',
  'lease_expired',
  'rejected_stale',
  'cancelled',
  'timed_out',
  'released',
];

describe('status CHECK constraints (migration 0021) on postgres', () => {
  const target = useEngineTarget('postgres');

  it('applies over rows of every status and kind an earlier version wrote, and keeps them', async () => {
    const admin = target.sql();
    const schema = `c_${randomBytes(5).toString('hex')}`;
    const opener = await target.engine({ schema, migrate: false });
    const all = await loadMigrations();
    const at = all.findIndex((m) => m.name === '0021_status-checks');
    expect(at).toBeGreaterThan(0);
    await migrate(opener.database, schema, all.slice(0, at));
    const s = admin(schema);
    await admin`
      INSERT INTO ${s}.runs (kind, name, status, queue)
      SELECT k, 'w', st, 'q' FROM unnest(${RUN_KINDS}::text[]) k, unnest(${RUN_STATUSES}::text[]) st`;
    await admin`
      INSERT INTO ${s}.steps (run_id, seq, kind, name, status, queue, retry_policy, lease_ms,
                              start_to_close_timeout_ms, fencing_scope, retired_at)
      SELECT gen_random_uuid(), 0, k, 'a', st, 'q', '{}', 1000, 1000, 'scope', now()
        FROM unnest(${STEP_KINDS}::text[]) k, unnest(${STEP_STATUSES}::text[]) st`;
    await admin`
      INSERT INTO ${s}.attempts (run_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at, outcome)
      SELECT gen_random_uuid(), k, 1, 1, nextval(${schema + '.fencing_token_seq'}), gen_random_uuid(), 'w', now(), o
        FROM unnest(${ATTEMPT_KINDS}::text[]) k, unnest(${ATTEMPT_OUTCOMES}::text[]) o`;

    const result = await migrate(opener.database, schema, all);

    expect(result.applied).toEqual(all.slice(at).map((m) => m.name));
    const [counts] = await admin<{ runs: number; steps: number; attempts: number }[]>`
      SELECT (SELECT count(*)::int FROM ${s}.runs) AS runs, (SELECT count(*)::int FROM ${s}.steps) AS steps,
             (SELECT count(*)::int FROM ${s}.attempts) AS attempts`;
    expect(counts).toEqual({
      runs: RUN_KINDS.length * RUN_STATUSES.length,
      steps: STEP_KINDS.length * STEP_STATUSES.length,
      attempts: ATTEMPT_KINDS.length * ATTEMPT_OUTCOMES.length,
    });
  });

  it('refuses a status, outcome or kind no state machine has, with SQLSTATE 23514', async () => {
    const admin = target.sql();
    const engine = await target.engine();
    const s = admin(engine.schema);

    const badStatus = await rejectionOf(admin`
      INSERT INTO ${s}.runs (kind, name, status, queue) VALUES ('workflow', 'w', 'retired', 'q')`);
    const badKind = await rejectionOf(admin`
      INSERT INTO ${s}.runs (kind, name, status, queue) VALUES ('job', 'w', 'pending', 'q')`);
    const badOutcome = await rejectionOf(admin`
      INSERT INTO ${s}.attempt_records (run_id, kind, attempt, epoch, fencing_token, nonce, worker_id, claimed_at, outcome)
      VALUES (gen_random_uuid(), 'turn', 1, 1, 1, gen_random_uuid(), 'w', now(), 'expired')`);

    expect([sqlState(badStatus), sqlState(badKind), sqlState(badOutcome)]).toEqual([
      '23514',
      '23514',
      '23514',
    ]);
    const [left] = await admin<{ n: number }[]>`
      SELECT (SELECT count(*)::int FROM ${s}.runs) + (SELECT count(*)::int FROM ${s}.attempts) AS n`;
    expect(left?.n).toBe(0);
  });
});
