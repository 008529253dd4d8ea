/**
 * `pnpm demo`: run every example in sequence, each printing its live timeline and its checks, then a summary.
 * Runs on the PostgreSQL server of DATABASE_URL if it is set, otherwise on the embedded database. Exits 1 if
 * any check of any example failed (or an example could not run).
 */
import { runInvoiceSettlementDemo } from './invoice-settlement/index.js';
import { runTranscodingDemo } from './transcoding/index.js';

/** What every example's `run…Demo` function takes. */
interface DemoOptions {
  readonly databaseUrl?: string;
  readonly log?: (line: string) => void;
}

/** What every example's `run…Demo` function resolves with (at least). */
interface DemoOutcome {
  readonly checks: readonly { readonly name: string; readonly ok: boolean; readonly detail?: string }[];
}

interface Demo {
  readonly name: string;
  run(options: DemoOptions): Promise<DemoOutcome>;
}

const demos: readonly Demo[] = [
  { name: 'invoice settlement', run: runInvoiceSettlementDemo },
  { name: 'video transcoding', run: runTranscodingDemo },
];

const databaseUrl = process.env.DATABASE_URL || undefined;
const log = (line: string): void => console.log(line);
const summary: { name: string; passed: number; failed: string[]; seconds: number }[] = [];

for (const demo of demos) {
  log('');
  log(`=== ${demo.name} (${databaseUrl ? 'PostgreSQL from DATABASE_URL' : 'embedded database'}) ===`);
  const startedAt = performance.now();
  try {
    const { checks } = await demo.run({ ...(databaseUrl ? { databaseUrl } : {}), log });
    summary.push({
      name: demo.name,
      passed: checks.filter((c) => c.ok).length,
      failed: checks.filter((c) => !c.ok).map((c) => c.name),
      seconds: (performance.now() - startedAt) / 1000,
    });
  } catch (error) {
    log(
      `${demo.name} could not run: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`,
    );
    summary.push({
      name: demo.name,
      passed: 0,
      failed: ['the demo ran'],
      seconds: (performance.now() - startedAt) / 1000,
    });
  }
}

log('');
log('=== summary ===');
for (const s of summary) {
  const verdict = s.failed.length === 0 ? 'ok' : 'FAILED';
  log(
    `${verdict.padEnd(6)} ${s.name}: ${s.passed}/${s.passed + s.failed.length} checks passed in ${s.seconds.toFixed(1)} s`,
  );
  for (const name of s.failed) log(`         ✗ ${name}`);
}
process.exitCode = summary.every((s) => s.failed.length === 0) ? 0 : 1;
