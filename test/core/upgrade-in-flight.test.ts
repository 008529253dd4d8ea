/**
 * Upgrades keep working with runs in flight (issue 28 item 8; STORAGE.md §3.11). The fixture
 * (../fixtures/upgrade/: data.sql, expected.json, written by build.ts at migration 0021, commit 8d115d2) is the
 * data of a schema that release wrote with real workers: a job whose worker died holding its lease, one whose
 * lease had already expired, one waiting for its retry backoff, a workflow sleeping on a timer, workflows waiting
 * for a signal (one with the signal already sent, not yet delivered), one blocked on a running activity, a
 * parent waiting on its sleeping child, a schedule with a tick due, a cancel requested, and finished runs.
 *
 * The test creates a schema, applies migrations 0000–0021 only, loads the data, migrates to the latest, moves
 * the database clock two days forward (past every lease, backoff, timer and the schedule's tick, which the
 * fixture set an hour after it was written), runs a worker, sends the signal still owed, and checks that every
 * run ends as it would have without the upgrade, that `describe()` still shows every attempt, event and signal
 * the fixture recorded (finished runs exactly as they were), and that every fencing token granted after the
 * upgrade is larger than every token the fixture holds. Every migration added after 0021 is tested here.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { loadMigrations, migrate, type Engine, type RunDetails } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import {
  ACTIVITIES,
  CASES,
  FIXTURE_VERSION,
  WORKFLOWS,
  approval,
  type CaseName,
} from '../fixtures/upgrade/definitions.js';
import {
  attemptsOf,
  eventsOf,
  loadSchemaData,
  snapshotRun,
  type ExpectedFixture,
  type RunSnapshot,
} from '../fixtures/upgrade/snapshot.js';

const FIXTURE_DIR = new URL('../fixtures/upgrade/', import.meta.url);
/** Past every lease (10 min), backoff (1 h), timer (1 h) and the schedule's tick (1 h) of the fixture. */
const CLOCK_ADVANCE_MS = 2 * 86_400_000;
const RESULT_TIMEOUT_MS = 60_000;
/** Runs that had ended when the fixture was written: describe() must show them exactly as it did. */
const FINISHED: readonly CaseName[] = [
  'job-completed',
  'job-failed',
  'workflow-completed',
  'schedule-triggered',
];

const target = useEngineTarget('postgres');

/** Wait for the run's end (result() rejects for a failed or cancelled run) and describe it. */
async function ended(engine: Engine, runId: string): Promise<RunDetails> {
  const handle = engine.client.getHandle(runId);
  await handle.result({ timeoutMs: RESULT_TIMEOUT_MS }).catch((error: unknown) => {
    if (error instanceof Error && /RESULT_TIMEOUT/.test(error.message)) throw error;
  });
  return handle.describe();
}

/** What the fixture recorded of `before` is all still in `after`; attempts that were running have ended. */
function expectHistoryKept(name: string, before: RunSnapshot, after: RunDetails): void {
  const attempts = attemptsOf(after);
  for (const old of before.attempts) {
    const now = attempts.find((a) => a.token === old.token);
    expect(now, `${name}: attempt with token ${old.token}`).toBeDefined();
    expect({ ...now, outcome: null }, `${name}: attempt ${old.token}`).toEqual({ ...old, outcome: null });
    // An attempt still running in the fixture was lost with its worker: the claim that took over ended it, as
    // expired (its lease) or timed out (its start-to-close deadline, also passed on the moved clock).
    if (old.outcome !== null)
      expect(now?.outcome, `${name}: outcome of attempt ${old.token}`).toBe(old.outcome);
    else
      expect(['lease_expired', 'timed_out'], `${name}: outcome of lost attempt ${old.token}`).toContain(
        now?.outcome,
      );
  }
  const events = eventsOf(after);
  for (const old of before.events) {
    expect(events, `${name}: event ${old.type} at ${old.at}`).toContainEqual(old);
  }
  for (const old of before.signals) {
    const now = after.signals.find((s) => s.id === old.id);
    expect(now && { id: now.id, name: now.name, payload: now.payload }, `${name}: signal ${old.id}`).toEqual({
      id: old.id,
      name: old.name,
      payload: old.payload,
    });
  }
  for (const step of before.steps) {
    expect(
      after.steps.map((s) => ({ id: s.id, seq: s.seq, kind: s.kind, name: s.name })),
      `${name}: step ${step.seq}`,
    ).toContainEqual({ id: step.id, seq: step.seq, kind: step.kind, name: step.name });
  }
}

describe('upgrading a database with runs in flight', () => {
  it(`migrates the data of ${FIXTURE_VERSION.lastMigration} (commit ${FIXTURE_VERSION.commit}) forward, and every run finishes as it would have`, async () => {
    const expected = JSON.parse(
      await readFile(new URL('expected.json', FIXTURE_DIR), 'utf8'),
    ) as ExpectedFixture;
    expect(expected.version).toEqual(FIXTURE_VERSION);
    const all = await loadMigrations();
    const fixtureAt = all.findIndex((m) => m.name === FIXTURE_VERSION.lastMigration);
    expect(fixtureAt).toBe(FIXTURE_VERSION.migrations - 1);

    const schema = `t_upgrade_${randomBytes(5).toString('hex')}`;
    const admin = target.sql();
    const engine = await target.engine({ schema, migrate: false });
    await migrate(engine.database, schema, all.slice(0, fixtureAt + 1));
    const statements = await loadSchemaData(
      admin,
      schema,
      await readFile(new URL('data.sql', FIXTURE_DIR), 'utf8'),
    );
    expect(statements).toBeGreaterThan(5);
    // The highest token the old release granted: its sequence, read while the schema is still at 0021.
    const [sequence] = await admin<{ value: string }[]>`
      select last_value::text as value from ${admin(schema)}.fencing_token_seq`;
    const fixtureMaxToken = BigInt(sequence?.value ?? 'NaN');
    const fixtureTokens = new Set(
      Object.values(expected.runs).flatMap((r) => r.attempts.map((a) => a.token)),
    );
    for (const token of fixtureTokens) expect(BigInt(token)).toBeLessThanOrEqual(fixtureMaxToken);

    const migrated = await engine.migrate();
    expect(migrated).toEqual({ applied: all.slice(fixtureAt + 1).map((m) => m.name), version: all.length });

    await advanceClock(engine, CLOCK_ADVANCE_MS);
    const worker = engine.worker({ workflows: WORKFLOWS, activities: ACTIVITIES, concurrency: 10 });
    // A clean upgrade raises no error in the worker (a token sequence set back, say, shows as unique violations
    // that the claim's retries would otherwise hide until the sequence passed the old tokens again).
    const workerErrors: string[] = [];
    worker.events.on('worker:error', ({ error }) => workerErrors.push(String(error)));
    await worker.start();
    const id = (name: CaseName): string => expected.runs[name]?.id ?? `missing case ${name}`;
    await engine.client.signal(id('workflow-awaiting-signal'), approval, { by: 'sent after the upgrade' });

    const names = Object.keys(CASES) as CaseName[];
    const details = await Promise.all(names.map((name) => ended(engine, id(name))));
    const child = await ended(engine, expected.childRunId);
    // The schedule's tick, due by the moved clock: fired by this evaluation or the worker's, once either way.
    await engine.schedules.evaluate();
    const scheduled = await engine.schedules.describe(expected.scheduleId);
    const fired = scheduled.recentRuns.filter((r) => r.id !== id('schedule-triggered'));
    expect(fired).toHaveLength(1);
    const tick = await ended(engine, fired[0]?.id ?? '');
    await worker.stop({ graceMs: 5_000 });
    expect(workerErrors).toEqual([]);

    const later: RunDetails[] = [...details, child, tick];
    names.forEach((name, k) => {
      const after = details[k] as RunDetails;
      const want: { status: string; output?: unknown } = CASES[name];
      expect(after.run.status, `${name}: status`).toBe(want.status);
      if ('output' in want) expect(after.run.output, `${name}: output`).toEqual(want.output);
      const before = expected.runs[name] as RunSnapshot;
      if (FINISHED.includes(name)) expect(snapshotRun(after), `${name}: unchanged`).toEqual(before);
      else expectHistoryKept(name, before, after);
    });
    expect(child.run).toMatchObject({ status: 'completed', output: { echoed: 'workflow-parent/child' } });
    expectHistoryKept('child', expected.runs.child as RunSnapshot, child);
    expect(tick.run).toMatchObject({ status: 'completed', output: { echoed: 'scheduled' } });
    const parent = details[names.indexOf('workflow-parent')] as RunDetails;
    expect(parent.children.map((c) => c.id)).toEqual([expected.childRunId]);
    const cancelled = details[names.indexOf('workflow-cancel-requested')] as RunDetails;
    expect(cancelled.run.cancelReason).toBe('upgrade fixture: cancel requested');
    const pending = details[names.indexOf('workflow-signal-pending')] as RunDetails;
    expect(pending.signals.map((s) => s.consumedAt !== null)).toEqual([true]);

    // Every run in flight was claimed again, each with a token the old release never granted.
    const newTokens = later
      .flatMap((d) => attemptsOf(d).map((a) => a.token))
      .filter((t) => !fixtureTokens.has(t));
    expect(newTokens.length).toBeGreaterThanOrEqual(names.length - FINISHED.length + 2);
    for (const token of newTokens) expect(BigInt(token)).toBeGreaterThan(fixtureMaxToken);
    for (const d of later) {
      for (const step of d.steps) {
        if (step.token !== null && !fixtureTokens.has(step.token)) {
          expect(BigInt(step.token)).toBeGreaterThan(fixtureMaxToken);
        }
      }
    }
  });
});
