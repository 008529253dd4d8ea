/**
 * The chaos suite's CI subset: every scenario of ./scenarios/index.ts at its CI iteration count, on a PostgreSQL
 * server this file starts itself (embedded, its own port and data directory — not the global setup's), with
 * the same checker as `pnpm chaos`. Each checker count must be 0 and every stale fenced write rejected.
 */
import postgres from '@palisade/engine/postgres';
import { createEngine } from '@palisade/engine';
import { defineActivity } from '@palisade/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeViolations } from './checker.js';
import { figuresTable } from './figures.js';
import { runScenario, startChaosServer, type ChaosServer, type ScenarioReport } from './harness.js';
import { SCENARIOS } from './scenarios/index.js';
import { z } from 'zod';

const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));

describe(`chaos scenarios, CI subset (seed ${seed})`, () => {
  let server: ChaosServer;
  const reports: ScenarioReport[] = [];
  beforeAll(async () => {
    server = await startChaosServer();
  });
  afterAll(async () => {
    await server.close();
    if (reports.length > 0) process.stdout.write(`\n${figuresTable(reports)}\n`);
  });

  it('owns a server it can crash (immediate shutdown) and restart, keeping committed data', async () => {
    const sql = postgres(server.databaseUrl, { max: 1, onnotice: () => undefined });
    try {
      await sql`CREATE TABLE restart_probe (n int)`;
      await sql`INSERT INTO restart_probe VALUES (1)`;
      await server.shutdown('immediate');
      await expect(sql`SELECT 1`).rejects.toThrow();
      await server.start();
      expect(await sql`SELECT n FROM restart_probe`).toEqual([{ n: 1 }]);
      await sql`DROP TABLE restart_probe`;
    } finally {
      await sql.end({ timeout: 1 });
    }
  });

  it('keeps a LISTEN through a server restart whose downtime outlasts the reconnect attempts', async () => {
    // The driver's listener re-subscribes when its connection closes; while the server is down that LISTEN fails
    // (ECONNREFUSED), and it must be tried again until it holds, never dropped: a lost LISTEN leaves every
    // NOTIFY-driven wake-up (workers, handle.result(), watch()) to its poll fallback for good.
    const listener = postgres(server.databaseUrl, { max: 1, onnotice: () => undefined });
    const notifier = postgres(server.databaseUrl, { max: 1, onnotice: () => undefined });
    try {
      const received: string[] = [];
      let arrived!: () => void;
      let next = new Promise<void>((resolve) => (arrived = resolve));
      let relistened!: () => void;
      const listening = new Promise<void>((resolve) => (relistened = resolve));
      let listens = 0;
      await listener.listen(
        'restart_probe',
        (payload) => {
          received.push(payload);
          arrived();
        },
        () => {
          if (++listens > 1) relistened();
        },
      );
      await notifier`SELECT pg_notify('restart_probe', 'before')`;
      await next;
      next = new Promise<void>((resolve) => (arrived = resolve));
      await server.shutdown('fast');
      // Down long enough for the listener's reconnect to be refused, probably more than once.
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      await server.start();
      await listening;
      await notifier`SELECT pg_notify('restart_probe', 'after')`;
      await next;
      expect(received).toEqual(['before', 'after']);
    } finally {
      await Promise.all([listener.end({ timeout: 1 }), notifier.end({ timeout: 1 })]);
    }
  });

  it('waits for a result across an outage that met its first LISTEN, and is woken when the run ends', async () => {
    // The engine's first wait subscribes (LISTEN) while the server is down: it must try again until the server
    // is back, not fail — nor keep the failed LISTEN, which answered every later wait of the engine with it.
    const double = defineActivity({
      name: 'double',
      input: z.object({ n: z.number() }),
      output: z.number(),
      run: ({ n }) => Promise.resolve(2 * n),
    });
    const engine = await createEngine({ databaseUrl: server.databaseUrl, schema: 'listen_outage' });
    try {
      const handle = await engine.client.enqueue(double, { n: 21 });
      await server.shutdown('fast');
      // A poll far longer than the test: only the NOTIFY of the run's end can wake the wait in time.
      const waiting = handle.result({ timeoutMs: 120_000, pollIntervalMs: 600_000 });
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      await server.start();
      const worker = engine.worker({ activities: [double] });
      await worker.start();
      expect(await waiting).toBe(42);
      // And a later wait of the same engine listens too.
      const again = await engine.client.enqueue(double, { n: 5 });
      expect(await again.result({ pollIntervalMs: 600_000 })).toBe(10);
    } finally {
      await engine.close({ graceMs: 0 });
    }
  });

  for (const [index, scenario] of SCENARIOS.entries()) {
    it(`${scenario.name}: ${scenario.description}`, async () => {
      // The harness's per-iteration lines are kept for a failure's message; a passing scenario prints one line.
      const lines: string[] = [];
      const startedAt = performance.now();
      const report = await runScenario(server, scenario, {
        iterations: scenario.iterations.ci,
        seed: seed + index,
        log: (line) => void lines.push(line),
      });
      reports.push(report);
      const clean =
        report.failures.length === 0 && Object.values(report.check.violations).every((n) => n === 0);
      process.stderr.write(
        `chaos ${scenario.name}: ${scenario.iterations.ci} iterations, ${clean ? 'ok' : 'VIOLATIONS'} in ` +
          `${((performance.now() - startedAt) / 1000).toFixed(1)} s\n`,
      );
      const summary =
        `${describeViolations(report.check)}\n${report.failures.join('\n')}\nhistory: ${report.historyFile ?? '-'}` +
        `\n--- scenario log (last 40 lines) ---\n${lines.slice(-40).join('\n')}`;
      expect(report.check.violations, summary).toEqual({
        overlap: 0,
        mono: 0,
        staleFenced: 0,
        terminal: 0,
        ack: 0,
        reject: 0,
        lost: 0,
      });
      expect(report.check.staleRejected, summary).toBe(report.check.staleAttempted);
      expect(report.failures, summary).toEqual([]);
      // Not vacuous: every iteration's run was checked.
      expect(report.check.runs).toBeGreaterThanOrEqual(scenario.iterations.ci);
    });
  }
});
