/**
 * Migration 0023 (issue 28, events derived from rows): a workflow's `run:started`, an activity's `step:scheduled`
 * and `run:completed` are no longer stored; the `run_events` view reads them off the rows. A database written
 * before it holds them stored: the migration deletes those the view now derives, so that a run in flight shows
 * each event once, the same history before and after the upgrade, and keeps a correct history as it finishes.
 */
import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow } from '@palisade/sdk';
import { loadMigrations, migrate, type Engine, type EventDescription } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker } from '../support/worker.js';
import { echoActivity } from '../fixtures/pure-activity.js';

const HOUR_MS = 3_600_000;

const step = echoActivity('up-step', z.string());

/** An activity, then (when asked) an hour's sleep, then another activity. */
const flow = defineWorkflow({
  name: 'up-flow',
  input: z.object({ sleep: z.boolean() }),
  output: z.string(),
  async run({ sleep }, ctx) {
    const a = await ctx.run(step, 'a');
    if (sleep) await ctx.sleep(HOUR_MS);
    return `${a}${await ctx.run(step, 'b')}`;
  },
});

/**
 * The events a release at migration 0021/0022 stored and 0023's view derives, inserted as that release's
 * statements wrote them: `run:started` at the run's creation (not for a delayed start, which stores its own
 * already), `step:scheduled` of each activity step at its insert, due then (granted at once), and a completed
 * run's terminal `run:completed`.
 */
async function storeAsBefore(engine: Engine): Promise<number> {
  const n = engine.names;
  const rows = await engine.database.rows<{ n: number }>(sql`
    WITH started AS (
      INSERT INTO ${n.events} (run_id, type, data, at)
      SELECT r.id, 'run:started', jsonb_build_object('workflow', r.name, 'queue', r.queue), r.created_at
        FROM ${n.runs} r
       WHERE r.kind = 'workflow'
         AND NOT EXISTS (SELECT 1 FROM ${n.events} x WHERE x.run_id = r.id AND x.type = 'run:started')
      RETURNING 1),
    scheduled AS (
      INSERT INTO ${n.events} (run_id, step_id, type, data, at)
      SELECT s.run_id, s.id, 'step:scheduled',
             jsonb_build_object('name', s.name, 'seq', s.seq, 'dueAt', s.created_at), s.created_at
        FROM ${n.steps} s JOIN ${n.runs} r ON r.id = s.run_id
       WHERE r.kind = 'workflow' AND s.kind = 'activity'
      RETURNING 1),
    ended AS (
      INSERT INTO ${n.events} (run_id, type, terminal, at)
      SELECT r.id, 'run:completed', true, r.finished_at FROM ${n.runs} r
       WHERE r.kind = 'workflow' AND r.status = 'completed'
      RETURNING 1)
    SELECT ((SELECT count(*) FROM started) + (SELECT count(*) FROM scheduled) + (SELECT count(*) FROM ended))::int AS n`);
  return rows[0]?.n ?? 0;
}

/** A history as the public API shows it, less the ids (a derived event's id names its row, not a stored one). */
function withoutIds(events: readonly EventDescription[]) {
  return events.map(({ id: _id, ...rest }) => rest);
}

describe('migration 0023: events the view now derives, stored before it', () => {
  const target = useEngineTarget('postgres');

  it('shows each event of runs in flight and ended once, the same before and after, and as they finish', async () => {
    const schema = `e_${randomBytes(5).toString('hex')}`;
    const all = await loadMigrations();
    const at = all.findIndex((m) => m.name === '0023_events-from-rows');
    expect(at).toBeGreaterThan(0);
    // The schema of the release before: every migration up to 0023.
    const before = await target.engine({ schema, migrate: false });
    await migrate(before.database, schema, all.slice(0, at));
    const w1 = await startWorker(before, [flow, step], { pollIntervalMs: 100 });
    const ended = await before.client.start(flow, { sleep: false });
    const sleeping = await before.client.start(flow, { sleep: true });
    const delayed = await before.client.start(flow, { sleep: false }, { delayMs: HOUR_MS });
    expect(await ended.result({ timeoutMs: 20_000 })).toBe('ab');
    await checkOnEvents(
      [w1],
      async () => (await sleeping.describe()).steps.some((s) => s.kind === 'timer'),
      'the sleep',
    );
    await w1.stop();
    const inserted = await storeAsBefore(before);
    // ended: started, 2 scheduled, completed; sleeping: started, 1 scheduled; delayed: none (its own is stored).
    expect(inserted).toBe(4 + 2);

    const handles = [ended, sleeping, delayed];
    const described = await Promise.all(handles.map((h) => h.describe()));
    const types = described.map((d) => d.events.map((e) => e.type));
    expect(types).toEqual([
      [
        'run:started',
        'step:scheduled',
        'attempt:claimed',
        'step:completed',
        'step:scheduled',
        'attempt:claimed',
        'step:completed',
        'run:completed',
      ],
      ['run:started', 'step:scheduled', 'attempt:claimed', 'step:completed', 'timer:started'],
      ['run:started'],
    ]);
    expect(described[2]?.events[0]?.data).toMatchObject({
      workflow: 'up-flow',
      start_at: expect.any(String) as string,
    });

    const result = await migrate(before.database, schema, all);
    expect(result.applied).toEqual(all.slice(at).map((m) => m.name));

    // The same histories, each event once; only the stored events the view now reads off the rows are gone.
    const after = await Promise.all(handles.map((h) => h.describe()));
    expect(after.map((d) => withoutIds(d.events))).toEqual(described.map((d) => withoutIds(d.events)));
    const stored = await before.database.rows<{ type: string; n: number }>(sql`
      SELECT type, count(*)::int AS n FROM ${before.names.events} GROUP BY type ORDER BY type`);
    expect(stored).toEqual([
      { type: 'run:started', n: 1 }, // the delayed start's
      { type: 'timer:started', n: 1 },
    ]);

    // The runs in flight finish under the new release, and their histories go on from where they were.
    const w2 = await startWorker(before, [flow, step], { pollIntervalMs: 100 });
    await advanceClock(before, HOUR_MS + 1_000);
    expect(await sleeping.result({ timeoutMs: 20_000 })).toBe('ab');
    expect(await delayed.result({ timeoutMs: 20_000 })).toBe('ab');
    await checkOnEvents(
      [w2],
      async () =>
        (await Promise.all(handles.map((h) => h.describe()))).every((d) => d.run.status === 'completed'),
      'the ends',
    );
    const finished = await Promise.all(handles.map((h) => h.describe()));
    const full = [
      'run:started',
      'step:scheduled',
      'attempt:claimed',
      'step:completed',
      'step:scheduled',
      'attempt:claimed',
      'step:completed',
      'run:completed',
    ];
    expect(finished.map((d) => d.events.map((e) => e.type))).toEqual([
      full,
      [...full.slice(0, 4), 'timer:started', 'timer:fired', ...full.slice(4)],
      full,
    ]);
    expect(withoutIds(finished[1]?.events.slice(0, 5) ?? [])).toEqual(withoutIds(described[1]?.events ?? []));
    for (const d of finished) expect(new Set(d.events.map((e) => e.id)).size).toBe(d.events.length);
  });
});
