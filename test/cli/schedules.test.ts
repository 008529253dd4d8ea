/**
 * `palisade schedules …` and the schedule line of `palisade runs show`, run as real processes against a fresh
 * schema. Schedules are made through the engine API; a tick is fired by time travel and an evaluation, as a
 * worker would.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineWorkflow } from '@palisade/sdk';
import { createEngine, type Engine } from '@palisade/engine';
import { advanceClock, databaseNow } from '@palisade/engine/testing';
import { useTestDatabase } from '../support/postgres.js';
import { CLI_TEST_TIMEOUT_MS, lines, runCli } from './cli-process.js';

const databaseUrl = useTestDatabase();
const schema = `cli_${randomBytes(5).toString('hex')}`;
const target = () => ['--database-url', databaseUrl(), '--schema', schema];

const digest = defineWorkflow({
  name: 'digest',
  input: z.object({ to: z.string() }),
  output: z.null(),
  run: () => Promise.resolve(null),
});

describe('palisade schedules', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  let engine: Engine;
  let tickRunId: string;
  let tickIso: string;

  beforeAll(async () => {
    engine = await createEngine({ databaseUrl: databaseUrl(), schema });
    const s = await engine.schedules.create({
      id: 'daily-digest',
      cron: '0 7 * * *',
      timezone: 'Europe/Paris',
      workflow: digest,
      input: { to: 'team@example.com' },
    });
    await engine.schedules.create({ id: 'ping', everyMs: '30s', workflow: digest, input: { to: 'ops' } });
    await advanceClock(engine, s.nextTickAt.getTime() - (await databaseNow(engine)).getTime() + 1_000);
    await engine.schedules.evaluate();
    const described = await engine.schedules.describe('daily-digest');
    tickRunId = described.recentRuns[0]?.id ?? '';
    tickIso = s.nextTickAt.toISOString();
  });
  afterAll(async () => {
    await engine?.close();
  });

  it('lists schedules as a table and as JSON', async () => {
    const [text, json] = await Promise.all([
      runCli(['schedules', 'list', ...target()]),
      runCli(['schedules', 'list', '--json', ...target()]),
    ]);
    expect(text.code).toBe(0);
    const rows = lines(text.stdout);
    expect(rows[0]).toMatch(/^SCHEDULE\s+SPEC\s+TARGET\s+STATE\s+NEXT TICK \(UTC\)\s+LAST TICK \(UTC\)/);
    expect(rows[1]).toMatch(/^daily-digest\s+0 7 \* \* \* \(Europe\/Paris\)\s+wf digest\s+active/);
    expect(rows[2]).toMatch(/^ping\s+every 30s\s+wf digest\s+active/);
    expect(json.code).toBe(0);
    const listed = JSON.parse(json.stdout) as { id: string; lastRunId: string | null; lastTickAt: string }[];
    expect(listed.map((s) => s.id)).toEqual(['daily-digest', 'ping']);
    expect(listed[0]).toMatchObject({ lastRunId: tickRunId, lastTickAt: tickIso });
  });

  it('shows a schedule with the runs of its ticks, and runs show names the schedule and tick', async () => {
    const [show, json, run] = await Promise.all([
      runCli(['schedules', 'show', 'daily-digest', ...target()]),
      runCli(['schedules', 'show', 'daily-digest', '--json', ...target()]),
      runCli(['runs', 'show', tickRunId, ...target()]),
    ]);
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/spec\s+0 7 \* \* \* \(Europe\/Paris\)/);
    expect(show.stdout).toMatch(/policy\s+overlap skip · catch-up latest · 0 ticks skipped/);
    expect(show.stdout).toContain(tickRunId);
    const parsed = JSON.parse(json.stdout) as { schedule: { id: string }; recentRuns: { id: string }[] };
    expect(parsed.schedule.id).toBe('daily-digest');
    expect(parsed.recentRuns.map((r) => r.id)).toEqual([tickRunId]);
    expect(run.code).toBe(0);
    const tickClock = `${tickIso.slice(0, 10)} ${tickIso.slice(11, 23)}`;
    expect(run.stdout).toMatch(
      new RegExp(`schedule\\s+daily-digest · tick (${tickClock}|${tickIso.slice(11, 23)}) UTC`),
    );
  });

  it('pauses, resumes, triggers and deletes a schedule', async () => {
    const paused = await runCli(['schedules', 'pause', 'ping', ...target()]);
    expect([paused.code, paused.stdout]).toEqual([0, 'schedule ping paused\n']);
    expect((await engine.schedules.get('ping')).paused).toBe(true);
    const resumed = await runCli(['schedules', 'resume', 'ping', '--json', ...target()]);
    expect(resumed.code).toBe(0);
    expect(JSON.parse(resumed.stdout)).toMatchObject({ id: 'ping', paused: false });
    const triggered = await runCli(['schedules', 'trigger', 'ping', ...target()]);
    expect(triggered.code).toBe(0);
    const runId = /started run ([0-9a-f-]{36})/.exec(triggered.stdout)?.[1] ?? '';
    expect((await engine.client.getHandle(runId).describe()).run.scheduleId).toBe('ping');
    const deleted = await runCli(['schedules', 'delete', 'ping', ...target()]);
    expect([deleted.code, deleted.stdout]).toEqual([0, 'schedule ping deleted\n']);
    expect((await engine.schedules.list()).map((s) => s.id)).toEqual(['daily-digest']);
  });

  it('exits 1 with [SCHEDULE_NOT_FOUND] naming an unknown id', async () => {
    const results = await Promise.all(
      ['show', 'pause', 'resume', 'trigger', 'delete'].map((command) =>
        runCli(['schedules', command, 'ghost', ...target()]),
      ),
    );
    for (const result of results) {
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        '[SCHEDULE_NOT_FOUND] schedule ghost does not exist; check the id (schedules list shows existing schedules)\n',
      );
    }
  });
});
