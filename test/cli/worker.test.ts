/**
 * `palisade worker <module>` as a real process: it serves what a fixture module exports (resolved from the
 * working directory), prints a line per claim, completion and turn, and stops gracefully on SIGTERM / SIGINT.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '@palisade/engine';
import { useTestDatabase } from '../support/postgres.js';
import { CLI_TEST_TIMEOUT_MS, lines, runCli, startCli, TEST_ROOT } from './cli-process.js';
import { greet } from './fixtures/greeter.js';

const databaseUrl = useTestDatabase();

describe('palisade worker <module>', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  const schema = `cli_${randomBytes(5).toString('hex')}`;
  let engine: Engine;
  const target = () => ['--database-url', databaseUrl(), '--schema', schema];

  beforeAll(async () => {
    engine = await createEngine({ databaseUrl: databaseUrl(), schema });
  });
  afterAll(async () => {
    await engine?.close({ graceMs: 0 });
  });

  it('serves a workflow run to completion, prints what it does, and exits 0 on SIGTERM', async () => {
    const handle = await engine.client.start(greet, { name: 'Ada' });
    const worker = startCli(
      ['worker', 'cli/fixtures/greeter.ts', '--worker-id', 'cli-worker', '--queue', 'default', ...target()],
      { cwd: TEST_ROOT, timeoutMs: 120_000 },
    );
    await worker.waitForOutput(/^worker started {2}cli-worker$/m);
    await expect(handle.result({ timeoutMs: 60_000 })).resolves.toEqual({ greeting: 'Hello, Ada' });
    await worker.waitForOutput(new RegExp(`turn\\s+greet\\s+run ${handle.runId}\\s+completed`));

    worker.child.kill('SIGTERM');
    const result = await worker.exited;
    expect(result.stderr).toBe('');
    expect([result.code, result.signal]).toEqual([0, null]);
    const out = result.stdout;
    expect(out).toMatch(/^ {2}workflows {3}greet$/m);
    expect(out).toMatch(/^ {2}activities {2}greeting-for$/m); // GREETING and notADefinition are not served
    expect(out).toMatch(/^ {2}queues {6}default · concurrency 10 · prefetch 50$/m);
    const run = handle.runId;
    expect(out).toMatch(new RegExp(`claimed\\s+greeting-for#\\d+\\s+run ${run}\\s+epoch 1 · token \\d+`));
    expect(out).toMatch(new RegExp(`completed\\s+greeting-for#\\d+\\s+run ${run}\\s+token \\d+`));
    expect(out).toMatch(new RegExp(`turn\\s+greet\\s+run ${run}\\s+blocked`));
    expect(out).toMatch(/^SIGTERM: stopping/m);
    expect(lines(out).at(-1)).toBe('worker stopped');

    // The run's timeline lists the workflow turns this worker ran as attempts too.
    const shown = await runCli(['runs', 'show', run, '--no-events', ...target()]);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/^\s+turn\s+1\s+1\s+\d+\s+cli-worker\s+completed\s/m);
    expect(shown.stdout).toMatch(/^\s+greeting-for#\d+\s+1\s+1\s+\d+\s+cli-worker\s+completed\s/m);
    expect(shown.stdout).not.toMatch(/^EVENTS/m);
  });

  it('prints one JSON object per line with --json and stops on SIGINT', async () => {
    const handle = await engine.client.start(greet, { name: 'Grace' });
    const worker = startCli(
      ['worker', 'cli/fixtures/greeter.ts', '--json', '--concurrency', '2', '--prefetch', '0', ...target()],
      {
        cwd: TEST_ROOT,
        timeoutMs: 120_000,
      },
    );
    await worker.waitForOutput(/"event":"worker:started"/);
    await expect(handle.result({ timeoutMs: 60_000 })).resolves.toEqual({ greeting: 'Hello, Grace' });
    await worker.waitForOutput(/"event":"turn:committed"[^\n]*"outcome":"completed"/);

    worker.child.kill('SIGINT');
    const result = await worker.exited;
    expect([result.code, result.signal]).toEqual([0, null]);
    const events = lines(result.stdout).map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(events[0]).toMatchObject({
      event: 'worker:started',
      workflows: ['greet'],
      activities: ['greeting-for'],
      queues: ['default'],
      concurrency: 2,
      prefetch: 0,
    });
    expect(events).toContainEqual(
      expect.objectContaining({ event: 'attempt:claimed', runId: handle.runId, epoch: 1, attempt: 1 }),
    );
    expect(events).toContainEqual(
      expect.objectContaining({ event: 'attempt:completed', runId: handle.runId }),
    );
    expect(events.at(-2)).toMatchObject({ event: 'worker:stopping', signal: 'SIGINT' });
    expect(events.at(-1)).toMatchObject({ event: 'worker:stopped' });
  });

  it('refuses a module that exports no workflow or activity, and a missing module, with exit code 1', async () => {
    const [empty, missing] = await Promise.all([
      runCli(['worker', 'cli/fixtures/no-definitions.ts', ...target()], { cwd: TEST_ROOT }),
      runCli(['worker', 'cli/fixtures/nope.ts', ...target()], { cwd: TEST_ROOT }),
    ]);
    expect(empty.code).toBe(1);
    expect(empty.stderr).toMatch(
      /^\[INVALID_OPTIONS\] worker module cli\/fixtures\/no-definitions.ts exports no workflow or activity/,
    );
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^\[INVALID_OPTIONS\] worker module cli\/fixtures\/nope.ts not found/);
  });
});
