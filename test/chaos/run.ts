/**
 * `pnpm chaos`: every chaos scenario (./scenarios/index.ts) at full iterations on a PostgreSQL server the suite
 * starts itself, then the figures table. Exits non-zero if any checker counts a violation, a stale fenced write
 * was not rejected, or a scenario assertion failed.
 *
 *   pnpm chaos                         # all scenarios, full iterations
 *   CHAOS_SEED=42 pnpm chaos           # replay a seed
 *   CHAOS_ONLY=T4 CHAOS_ITERATIONS=2 pnpm chaos   # scenarios whose name starts with T4, 2 iterations each
 */
import { figuresTable } from './figures.js';
import { failed, runScenario, startChaosServer, type ScenarioReport } from './harness.js';
import { SCENARIOS } from './scenarios/index.js';

const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const only = process.env.CHAOS_ONLY;
const iterationsOverride = process.env.CHAOS_ITERATIONS ? Number(process.env.CHAOS_ITERATIONS) : undefined;

const log = (line: string): void => void process.stderr.write(`${line}\n`);
log(`chaos: seed ${seed}; starting the suite's PostgreSQL server`);
const server = await startChaosServer();
const reports: ScenarioReport[] = [];
try {
  for (const [index, scenario] of SCENARIOS.entries()) {
    if (only !== undefined && !scenario.name.startsWith(only)) continue;
    const iterations = iterationsOverride ?? scenario.iterations.full;
    log(`chaos: ${scenario.name} × ${iterations} — ${scenario.description}`);
    const report = await runScenario(server, scenario, { iterations, seed: seed + index, log });
    log(
      `chaos: ${scenario.name} ${failed(report) ? 'FAILED' : 'ok'} in ${(report.durationMs / 1000).toFixed(1)} s`,
    );
    reports.push(report);
  }
} finally {
  await server.close();
}
process.stdout.write(`\n${figuresTable(reports)}\n`);
process.exitCode = reports.some(failed) || reports.length === 0 ? 1 : 0;
