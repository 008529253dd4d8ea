/**
 * `pnpm demo`: run every example in sequence, each printing its live timeline and its checks, then a summary.
 * Runs on the PostgreSQL server of DATABASE_URL if it is set, in a schema of its own (`palisade_demo_<random>`,
 * dropped at the end and on Ctrl-C; kept with PALISADE_DEMO_KEEP=1, and then the summary prints the
 * `palisade runs show` commands that open the zombies' runs); otherwise on an in-memory embedded database. It never
 * touches a schema it did not create: the examples move their schema's database clock (see ./demo-target.ts). The
 * transcoding example's files go to a temporary directory, removed at the end and on Ctrl-C (kept with
 * PALISADE_DEMO_KEEP=1). Exits 1 if any check of any example failed (or an example could not run).
 */
import { demoTarget, dropDemoSchemas, makeDemoWorkDir, removeDemoWorkDir } from './demo-target.js';
import { runInvoiceSettlementDemo } from './invoice-settlement/index.js';
import { runSupportAgentDemo } from './support-agent/index.js';
import { runTranscodingDemo } from './transcoding/index.js';

/** What every example's `run…Demo` function takes. */
interface DemoOptions {
  readonly databaseUrl?: string;
  readonly dataDir?: string;
  /** Where an example that works on files (transcoding) writes them. */
  readonly workDir?: string;
  readonly schema?: string;
  readonly keepSchema?: boolean;
  readonly log?: (line: string) => void;
}

/** What every example's `run…Demo` function resolves with (at least). */
interface DemoOutcome {
  readonly checks: readonly { readonly name: string; readonly ok: boolean; readonly detail?: string }[];
  readonly runId: string | undefined;
}

interface Demo {
  readonly name: string;
  run(options: DemoOptions): Promise<DemoOutcome>;
  /** What the zombie of this example did, for the line beside its `runs show` command. */
  zombie(outcome: DemoOutcome): string;
  /** More runs worth opening: the run id and what it shows. */
  more?(outcome: DemoOutcome): readonly { runId: string | undefined; what: string }[];
}

const demos: readonly Demo[] = [
  {
    name: 'invoice settlement',
    run: runInvoiceSettlementDemo,
    zombie: (o) => {
      const r = (o as Awaited<ReturnType<typeof runInvoiceSettlementDemo>>).rejection;
      return r
        ? `${r.staleWorker}'s write for ${r.invoiceNumber} with token ${r.staleToken}, refused by the ${r.refusedBy}`
        : 'the stalled worker';
    },
    more: (o) => [
      {
        runId: (o as Awaited<ReturnType<typeof runInvoiceSettlementDemo>>).databaseRefusalRunId,
        what: "the settlement note whose zombie write the database's fence refused",
      },
    ],
  },
  {
    name: 'video transcoding',
    run: runTranscodingDemo,
    zombie: (o) => {
      const s = (o as Awaited<ReturnType<typeof runTranscodingDemo>>).stall;
      return s
        ? `${s.workerId}'s upload of ${s.key} with token ${s.token}, ${s.outcome ?? 'pending'}`
        : 'the stall';
    },
  },
  {
    name: 'support agent',
    run: runSupportAgentDemo,
    zombie: () => 'the email whose worker was killed mid-loop (its progress streamed by handle.watch())',
    more: (o) => {
      const r = o as Awaited<ReturnType<typeof runSupportAgentDemo>>;
      return [
        { runId: r.zombieRunId, what: 'the refund whose zombie write was refused' },
        {
          runId: r.timedOutRunId,
          what: 'the approval that timed out after two days of database time, escalated',
        },
      ];
    },
  },
];

const target = demoTarget();
const { databaseUrl } = target;
const workDir = await makeDemoWorkDir();
const where: DemoOptions = {
  ...(databaseUrl ? { databaseUrl } : {}),
  workDir,
  schema: target.schema,
  keepSchema: target.keepSchema,
};

/** What the demo made and does not keep: its schemas (PostgreSQL) and its files. */
const removed = [
  ...(databaseUrl && !target.keepSchema ? [`schema ${target.schema}`] : []),
  ...(target.keepFiles ? [] : [workDir]),
];

/** Remove what the demo made, unless kept (PALISADE_DEMO_KEEP=1); on Ctrl-C or SIGTERM too, then exit. */
async function cleanUp(): Promise<void> {
  if (!target.keepFiles) await removeDemoWorkDir(workDir);
  if (databaseUrl && !target.keepSchema) await dropDemoSchemas(databaseUrl, target.schema);
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    console.log(`\n${signal}: removing ${removed.join(' and ') || 'nothing (kept)'}`);
    void cleanUp()
      .catch((error: unknown) => console.error(`could not remove what the demo made: ${String(error)}`))
      .finally(() => process.exit(130));
  });
}

const zombieRuns: { name: string; runId: string; what: string }[] = [];
const log = (line: string): void => console.log(line);
const summary: { name: string; passed: number; failed: string[]; seconds: number }[] = [];

for (const demo of demos) {
  log('');
  log(
    `=== ${demo.name} (${databaseUrl ? `PostgreSQL from DATABASE_URL, schema ${target.schema}` : 'in-memory embedded database'}) ===`,
  );
  const startedAt = performance.now();
  try {
    const outcome = await demo.run({ ...where, log });
    const { checks } = outcome;
    if (outcome.runId) zombieRuns.push({ name: demo.name, runId: outcome.runId, what: demo.zombie(outcome) });
    for (const m of demo.more?.(outcome) ?? []) {
      if (m.runId) zombieRuns.push({ name: demo.name, runId: m.runId, what: m.what });
    }
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
if (zombieRuns.length > 0 && databaseUrl && target.keepSchema) {
  log('');
  log(`=== the zombies' runs, kept in the DATABASE_URL database, schema ${target.schema} ===`);
  for (const z of zombieRuns) {
    log(`# ${z.name}: ${z.what}`);
    log(`npx -y pnpm@12.4.2 palisade runs show ${z.runId} --schema ${target.schema}`);
  }
  log(`# every run of the demo: npx -y pnpm@12.4.2 palisade runs list --schema ${target.schema}`);
  log(`# drop them after: schemas ${target.schema} and ${target.schema}_* (DROP SCHEMA … CASCADE)`);
} else if (zombieRuns.length > 0) {
  log('');
  log(
    databaseUrl
      ? `(schema ${target.schema} dropped; PALISADE_DEMO_KEEP=1 keeps it to open the zombies' runs with palisade runs show)`
      : "(in memory: run with DATABASE_URL and PALISADE_DEMO_KEEP=1 to keep the zombies' runs to open with palisade runs show)",
  );
}
if (target.keepFiles) log(`(the transcoding example's files are kept in ${workDir}; remove it after)`);
await cleanUp().catch((error: unknown) => log(`could not remove what the demo made: ${String(error)}`));
process.exitCode = summary.every((s) => s.failed.length === 0) ? 0 : 1;
