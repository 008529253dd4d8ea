/**
 * The chaos suite's CI subset: every scenario of ./scenarios/index.ts at its CI iteration count, on a PostgreSQL
 * server this file starts itself (embedded, its own port and data directory — not the global setup's), with
 * the same checker as `pnpm chaos`. Each checker count must be 0 and every stale fenced write rejected.
 */
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeViolations } from './checker.js';
import { figuresTable } from './figures.js';
import { runScenario, startChaosServer, type ChaosServer, type ScenarioReport } from './harness.js';
import { SCENARIOS } from './scenarios/index.js';

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
