/**
 * `palisade runs prune`, run as a real process against a fresh schema: two runs that completed two hours ago by
 * the database clock (aged with time travel, which the CLI's engine reads too) and one that is still pending.
 */
import { sql } from 'drizzle-orm';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { createEngine, type Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { useTestDatabase } from '../support/postgres.js';
import { CLI_TEST_TIMEOUT_MS, runCli } from './cli-process.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const databaseUrl = useTestDatabase();

const echo = defineActivity({
  name: 'echo',
  input: z.object({ n: z.number() }),
  output: z.object({ n: z.number() }),
  run: (input) => Promise.resolve(input),
});

/** Nobody serves it: its run stays pending. */
const idle = emptyActivity('idle');

describe('palisade runs prune', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  const schema = `cli_${randomBytes(5).toString('hex')}`;
  const target = () => ['--database-url', databaseUrl(), '--schema', schema];
  let engine: Engine;
  let completed: string[];
  let pendingRunId: string;

  beforeAll(async () => {
    engine = await createEngine({ databaseUrl: databaseUrl(), schema });
    const worker = engine.worker({ activities: [echo], pollIntervalMs: 50 });
    await worker.start();
    const handles = await Promise.all([1, 2].map((n) => engine.client.enqueue(echo, { n })));
    for (const h of handles) await h.result({ timeoutMs: 20_000 });
    await worker.stop({ graceMs: 1_000 });
    completed = handles.map((h) => h.runId);
    pendingRunId = (await engine.client.enqueue(idle, {})).runId;
    await advanceClock(engine, 2 * 3_600_000);
  });

  afterAll(async () => {
    await engine?.close({ graceMs: 0 });
  });

  it('counts with --dry-run, then deletes the runs that ended before the cutoff and keeps the pending one', async () => {
    // The rows of the events table (describe() also shows the events read off runs and attempts, which are not
    // stored: see the run_events view).
    const [{ events } = { events: -1 }] = await engine.database.rows<{ events: number }>(sql`
      SELECT count(*)::int AS events FROM ${engine.names.events} WHERE run_id IN ${completed}`);

    const dry = await runCli(['runs', 'prune', '--older-than', '1h', '--dry-run', ...target()]);
    expect(dry.stderr).toBe('');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toBe(
      `would delete 2 runs (2 steps, 2 attempts, ${events} events) that ended more than 1h ago\n`,
    );
    expect((await engine.client.list()).length).toBe(3);

    const real = await runCli(['runs', 'prune', '--older-than', '60m', '--json', ...target()]);
    expect(real.stderr).toBe('');
    expect(real.code).toBe(0);
    expect(JSON.parse(real.stdout)).toEqual({
      runs: 2,
      steps: 2,
      attempts: 2,
      events,
      olderThanMs: 3_600_000,
      dryRun: false,
    });
    expect((await engine.client.list()).map((r) => r.id)).toEqual([pendingRunId]);

    const again = await runCli(['runs', 'prune', '--older-than', '1h', ...target()]);
    expect(again.stdout).toBe('deleted 0 runs (0 steps, 0 attempts, 0 events) that ended more than 1h ago\n');
  });

  it('exits 2 with the usage for a bad or missing --older-than', async () => {
    const cases: [string[], RegExp][] = [
      [
        ['--older-than', '30x'],
        /--older-than <duration>' argument '30x' is invalid\. must be a duration[\s\S]*Usage: palisade runs prune/,
      ],
      [['--older-than', '30'], /argument '30' is invalid\. must be a duration/],
      [[], /error: required option '--older-than <duration>' not specified/],
    ];
    const results = await Promise.all(cases.map(([args]) => runCli(['runs', 'prune', ...args, ...target()])));
    for (const [i, result] of results.entries()) {
      expect(result.code, cases[i]?.[0].join(' ')).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(cases[i]?.[1] as RegExp);
    }
    expect((await engine.client.list()).map((r) => r.id)).toEqual([pendingRunId]);
  });
});
