import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { eq } from 'drizzle-orm';
import type { Engine, RunDetails } from '@palisade/engine';
import { chargeKey, createInvoiceActivities } from './activities.js';
import type { AppDatabase } from './app-database.js';
import { verifySettlement, type CurrencyTotal, type DemoCheck, type StaleWriteRejection } from './checks.js';
import { formatMoney, isCurrencyCode } from './currencies.js';
import { closeDemoResources, openDemoResources } from '../shared/demo-resources.js';
import { parseInvoiceCsv, type MalformedRow } from './parse-invoices.js';
import { PaymentProvider } from './payment-provider.js';
import { demonstrateDatabaseFence } from './fence-stall.js';
import { StallFault, type StallRecord } from './stall-fault.js';
import { invoiceTables, invoiceTablesDdl, type InvoiceTables } from './tables.js';
import { Timeline, describeError } from './timeline.js';
import { createInvoiceSettlementWorkflow, type SettlementReport } from './workflow.js';

/** Options of {@link runInvoiceSettlementDemo}. */
export interface InvoiceSettlementDemoOptions {
  /** A PostgreSQL server to run on. @defaultValue the embedded database (an in-memory PGlite) */
  readonly databaseUrl?: string;
  /** Where each line of the live timeline and of the checks goes. @defaultValue `console.log` */
  readonly log?: (line: string) => void;
  /**
   * Schema of the engine's tables; the billing tables are in `<schema>_app`, the provider's in `<schema>_provider`.
   * @defaultValue `invoices_<random>`
   */
  readonly schema?: string;
  /** Keep the three schemas after the run (PostgreSQL only; the embedded database is in memory). @defaultValue false */
  readonly keepSchema?: boolean;
  /**
   * Without `databaseUrl`: an embedded database directory to run in (file-backed, kept, locked to this process)
   * instead of an in-memory PGlite, e.g. `.palisade/db`, which `palisade runs list` reads by default.
   */
  readonly dataDir?: string;
}

/** What {@link runInvoiceSettlementDemo} found. Tokens are decimal strings (they are 64-bit). */
export interface InvoiceSettlementDemoResult {
  /** True when every check passed. */
  readonly ok: boolean;
  readonly database: 'postgres' | 'pglite';
  readonly schema: string;
  readonly batchId: string;
  readonly runId: string | undefined;
  readonly checks: readonly DemoCheck[];
  readonly counts: {
    readonly csvRows: number;
    readonly validInvoices: number;
    readonly malformedRows: number;
    readonly providerCharges: number;
    /** Requests that presented an idempotency key already used, and got the same charge back. */
    readonly providerReplays: number;
    readonly ledgerRows: number;
    readonly paidInvoices: number;
  };
  /** The rows reported and skipped, with their line numbers. */
  readonly malformed: readonly MalformedRow[];
  /** Per currency: CSV, provider, ledger and settlement totals in minor units. */
  readonly totals: readonly CurrencyTotal[];
  /** The stalled worker's refused write, with its stale and the current token. */
  readonly rejection: StaleWriteRejection | undefined;
  /** The run of the settlement note whose first write the database's fence refused (see fence-stall.ts). */
  readonly databaseRefusalRunId: string | undefined;
  /** What the workflow returned. */
  readonly report: SettlementReport | undefined;
  readonly timingsMs: {
    readonly setup: number;
    readonly run: number;
    readonly verify: number;
    readonly total: number;
  };
}

/** The demo's fixed scenario. */
export const INVOICE_SETTLEMENT_DEMO = Object.freeze({
  /** The committed batch (generated once by `data/generate-invoices.ts`). */
  csvPath: fileURLToPath(new URL('../../src/invoice-settlement/data/invoices.csv', import.meta.url)),
  sourceName: 'invoices.csv',
  /** The invoice whose first charge stalls. */
  stalledInvoice: 'INV-2026-00005',
  chargeWorkers: Object.freeze(['worker-1', 'worker-2']),
  /**
   * Charge attempts each worker runs at once: one, so that when a worker stalls nothing else of it is caught half-way
   * (see `StallFault`), and the stall shows alone.
   */
  concurrency: 1,
  /** Charges the workflow keeps scheduled at once (two running, two waiting for a free worker). */
  parallelism: 4,
  /**
   * Lease of every attempt (ms); the worker heartbeats every third of it and gives a lease up locally a safety margin
   * (1 s) before it ends. Short, so the stall takes seconds; not the 3 s minimum, so a busy machine does not lose
   * leases the demo did not mean to lose.
   */
  leaseMs: 4_000,
  pollIntervalMs: 1_000,
  /**
   * Client-side limit of one heartbeat (ms): the whole interval (a third of the lease) rather than the default half,
   * so a busy machine does not time out heartbeats the database would have answered.
   */
  heartbeatTimeoutMs: 1_333,
  /** Give up on the run after this long (ms). */
  runTimeoutMs: 180_000,
});

/**
 * Run the invoice-settlement example end to end and check it. A workflow validates a committed CSV batch (reporting
 * malformed rows by line), charges every invoice at a payment provider on loopback (idempotency keys, its own
 * table) from two workers, writes each ledger entry and marks each invoice paid through `ctx.fencedTransaction`,
 * and settles the batch. One worker stalls on a chosen invoice: the provider holds its answer and the worker's
 * database link is cut, so its lease runs out; the other worker reclaims the invoice, gets the same charge back and
 * writes the ledger entry; when the stalled worker wakes, its fenced write is refused. The checks compare the
 * provider's table, the ledger, the invoices and the settlement with the CSV, and read the engine's history.
 *
 * Prints a live timeline and the checks through `log`; never throws for a failed check (see `ok` and `checks`).
 * @throws only when the database cannot be opened or the batch file cannot be read.
 */
export async function runInvoiceSettlementDemo(
  options: InvoiceSettlementDemoOptions = {},
): Promise<InvoiceSettlementDemoResult> {
  const demo = INVOICE_SETTLEMENT_DEMO;
  const log = options.log ?? ((line: string) => console.log(line));
  const database = options.databaseUrl ? 'postgres' : 'pglite';
  const schema = options.schema ?? `invoices_${randomBytes(4).toString('hex')}`;
  const appSchema = `${schema}_app`;
  const providerSchema = `${schema}_provider`;
  const batchId = `batch-${randomBytes(3).toString('hex')}`;
  const csv = readFileSync(demo.csvPath, 'utf8');
  const parsed = parseInvoiceCsv(csv);
  const timeline = new Timeline(log, {
    watchedInvoice: demo.stalledInvoice,
    totalInvoices: () => parsed.invoices.length,
  });
  const keyOf = (invoiceNumber: string): string => chargeKey(batchId, invoiceNumber);
  const invoiceOf = (key: string): string => key.slice(keyOf('').length);

  const resources = await openDemoResources({
    databaseUrl: options.databaseUrl,
    schema,
    dataDir: options.dataDir,
    workerIds: INVOICE_SETTLEMENT_DEMO.chargeWorkers,
    applicationName: 'invoice-settlement-demo',
  });
  let provider: PaymentProvider | undefined;
  let fault: StallFault | undefined;
  let runId: string | undefined;
  let report: SettlementReport | undefined;
  let runMs = 0;
  try {
    await resources.app.run(invoiceTablesDdl(appSchema));
    const tables = invoiceTables(appSchema);
    provider = await PaymentProvider.start({ database: resources.app, schema: providerSchema });
    timeline.watchProvider(provider, invoiceOf);
    fault = new StallFault({
      invoiceNumber: demo.stalledInvoice,
      idempotencyKey: keyOf(demo.stalledInvoice),
      provider,
      links: resources.links,
      timeline,
    });
    const onActivityEvent = fault.onActivityEvent;
    const activities = createInvoiceActivities(
      {
        tables,
        providerUrl: provider.url,
        onEvent: (event) => {
          timeline.activity(event);
          onActivityEvent(event);
        },
      },
      { leaseMs: demo.leaseMs },
    );
    const workflow = createInvoiceSettlementWorkflow(activities);

    const orchestrator = resources.main.worker({
      workerId: 'orchestrator',
      workflows: [workflow],
      activities: [activities.validateBatch, activities.settleBatch],
      pollIntervalMs: demo.pollIntervalMs,
      heartbeatTimeoutMs: demo.heartbeatTimeoutMs,
    });
    timeline.watchWorker(orchestrator, 'orchestrator');
    watchBatchSteps(orchestrator, timeline);
    const chargeWorkers = [...resources.workerEngines].map(([workerId, engine]) => {
      const worker = engine.worker({
        workerId,
        activities: [activities.chargeInvoice],
        concurrency: demo.concurrency,
        pollIntervalMs: demo.pollIntervalMs,
        heartbeatTimeoutMs: demo.heartbeatTimeoutMs,
      });
      timeline.watchWorker(worker, workerId);
      return worker;
    });
    await Promise.all([orchestrator.start(), ...chargeWorkers.map((w) => w.start())]);
    const setupMs = timeline.elapsedMs();
    timeline.line(
      'setup',
      `${database === 'postgres' ? 'PostgreSQL' : 'embedded PGlite'}, schemas ${schema} (engine), ${appSchema} ` +
        `(invoices, ledger), ${providerSchema} (provider at ${provider.url}); ${chargeWorkers.length} charge workers, ` +
        `${demo.concurrency} attempt at a time, each with its own database link; lease ${demo.leaseMs} ms, heartbeat every ` +
        `${Math.floor(demo.leaseMs / 3)} ms; the first charge of ${demo.stalledInvoice} will stall`,
    );

    const handle = await resources.main.client.start(
      workflow,
      { batchId, sourceName: demo.sourceName, csv, parallelism: demo.parallelism },
      { key: batchId },
    );
    runId = handle.runId;
    timeline.line('client', `started invoice-settlement run ${runId} for ${batchId} (${demo.sourceName})`);
    const runStartedMs = timeline.elapsedMs();
    try {
      report = await handle.result({ timeoutMs: demo.runTimeoutMs, pollIntervalMs: 500 });
      timeline.line('client', `run completed: ${report.charged.length} invoices charged, batch settled`);
    } catch (error) {
      timeline.line('client', `run did not complete: ${describeError(error)}`);
    }
    runMs = timeline.elapsedMs() - runStartedMs;
    // The stalled attempt wakes once the takeover committed, which may be just after the run completed.
    await Promise.race([fault.settled, delay(15_000)]);
    const description = await historyWithStaleRejection(() => handle.describe(), fault.record);
    // The second fault, beside the worker's own refusal above: the database's fence refusing a zombie's write.
    const fenceStall = await demonstrateDatabaseFence({
      engine: resources.main,
      app: resources.app,
      appSchema,
      batchId,
      leaseMs: demo.leaseMs,
      timeline,
    });

    const verifyStartedMs = timeline.elapsedMs();
    const stored = await readBack(resources.app, tables, batchId);
    const charges = (await provider.charges()).filter((c) => c.idempotencyKey.startsWith(keyOf('')));
    const { checks, totals, rejection } = verifySettlement({
      csv: parsed,
      report,
      storedMalformed: stored.malformed,
      charges,
      keyOf,
      ledger: stored.ledger,
      invoices: stored.invoices,
      settlement: stored.settlement,
      stall: fault.record,
      description,
    });
    if (fenceStall) checks.push(fenceStall.check);
    const verifyMs = timeline.elapsedMs() - verifyStartedMs;
    const ok = checks.every((c) => c.ok);
    printSummary(log, { database, totals, rejection, checks, ok });
    const totalMs = timeline.elapsedMs();
    log(
      `  ${ok ? 'all checks passed' : 'SOME CHECKS FAILED'} in ${(totalMs / 1000).toFixed(1)} s ` +
        `(setup ${(setupMs / 1000).toFixed(1)} s, run ${(runMs / 1000).toFixed(1)} s, verify ${(verifyMs / 1000).toFixed(1)} s)`,
    );
    return {
      ok,
      database,
      schema,
      batchId,
      runId,
      checks,
      counts: {
        csvRows: parsed.rowsRead,
        validInvoices: parsed.invoices.length,
        malformedRows: parsed.malformed.length,
        providerCharges: charges.length,
        providerReplays: charges.reduce((n, c) => n + c.requestCount - 1, 0),
        ledgerRows: stored.ledger.length,
        paidInvoices: stored.invoices.filter((i) => i.status === 'paid').length,
      },
      malformed: report?.malformed ?? [],
      totals,
      rejection,
      databaseRefusalRunId: fenceStall?.runId,
      report,
      timingsMs: { setup: setupMs, run: runMs, verify: verifyMs, total: totalMs },
    };
  } finally {
    fault?.dispose();
    await closeDemoResources(
      resources,
      provider,
      options.keepSchema ? [] : [schema, appSchema, providerSchema],
    );
  }
}

/** Print what the orchestrator's own steps found: the validation report and the settlement. */
function watchBatchSteps(orchestrator: ReturnType<Engine['worker']>, timeline: Timeline): void {
  orchestrator.events.on('attempt:completed', ({ attempt, output }) => {
    if (attempt.stepLabel.startsWith('invoice-settlement.validate-batch')) {
      const o = output as { rowsRead: number; invoices: unknown[]; malformed: MalformedRow[] };
      timeline.line(
        'orchestrator',
        `validated the batch: ${o.rowsRead} rows, ${o.invoices.length} valid, ${o.malformed.length} malformed (reported, skipped):`,
      );
      for (const m of o.malformed) {
        timeline.line('', `  line ${m.line}${m.invoiceNumber ? ` (${m.invoiceNumber})` : ''}: ${m.reason}`);
      }
    } else if (attempt.stepLabel.startsWith('invoice-settlement.settle-batch')) {
      const o = output as { invoiceCount: number; totals: { currency: string; amountMinor: number }[] };
      timeline.line(
        'orchestrator',
        `settled ${o.invoiceCount} invoices: ` +
          o.totals
            .map((t) => (isCurrencyCode(t.currency) ? formatMoney(t.amountMinor, t.currency) : t.currency))
            .join(', '),
      );
    }
  });
}

function printSummary(
  log: (line: string) => void,
  s: {
    database: string;
    totals: readonly CurrencyTotal[];
    rejection: StaleWriteRejection | undefined;
    checks: readonly DemoCheck[];
    ok: boolean;
  },
): void {
  log('');
  log(`totals (${s.database}) — CSV | provider | ledger | settlement:`);
  for (const t of s.totals) {
    const money = (n: number): string =>
      isCurrencyCode(t.currency) ? formatMoney(n, t.currency) : String(n);
    const same =
      t.csvMinor === t.providerMinor && t.csvMinor === t.ledgerMinor && t.csvMinor === t.settledMinor;
    log(
      `  ${same ? '=' : '≠'} ${String(t.invoices).padStart(3)} invoices  ${money(t.csvMinor).padStart(20)}` +
        (same
          ? '  (all four agree)'
          : ` | ${money(t.providerMinor)} | ${money(t.ledgerMinor)} | ${money(t.settledMinor)}`),
    );
  }
  const r = s.rejection;
  if (r) {
    log('');
    log(`rejected write (${r.invoiceNumber}):`);
    log(`  stale   token ${r.staleToken} · epoch ${r.staleEpoch} · ${r.staleWorker}`);
    log(
      `  current token ${r.currentToken ?? '?'} · epoch ${r.currentEpoch ?? '?'} · ${r.currentWorker ?? '?'} (its ledger entry counts: token ${r.ledgerToken ?? '?'})`,
    );
    log(`  refused by the ${r.refusedBy}: ${r.error.message || '(no error)'}`);
    if (r.recorded) {
      log(
        `  history: attempt:stale-rejected · ${r.recorded.operation} · ${r.recorded.reason} · stale ${r.recorded.staleToken} ` +
          `· current ${r.recorded.currentToken}`,
      );
    }
  }
  log('');
  log(`checks (${s.database}):`);
  for (const c of s.checks) log(`  ${c.ok ? '✓' : '✗'} ${c.name} — ${c.detail}`);
}

async function readBack(app: AppDatabase, t: InvoiceTables, batchId: string) {
  const db = app.db;
  const [batch] = await db
    .select({ malformed: t.batches.malformed })
    .from(t.batches)
    .where(eq(t.batches.id, batchId));
  const ledger = await db
    .select({
      invoiceNumber: t.ledgerEntries.invoiceNumber,
      chargeId: t.ledgerEntries.chargeId,
      currency: t.ledgerEntries.currency,
      amountMinor: t.ledgerEntries.amountMinor,
      fencingToken: t.ledgerEntries.fencingToken,
      workerId: t.ledgerEntries.workerId,
    })
    .from(t.ledgerEntries)
    .where(eq(t.ledgerEntries.batchId, batchId))
    .orderBy(t.ledgerEntries.id);
  const invoices = await db
    .select({
      invoiceNumber: t.invoices.invoiceNumber,
      status: t.invoices.status,
      chargeId: t.invoices.chargeId,
    })
    .from(t.invoices)
    .where(eq(t.invoices.batchId, batchId));
  const [settlement] = await db.select().from(t.settlements).where(eq(t.settlements.batchId, batchId));
  return {
    malformed: batch?.malformed,
    ledger: ledger.map((l) => ({ ...l, currency: l.currency.trim() })),
    invoices,
    settlement: settlement ? { invoiceCount: settlement.invoiceCount, totals: settlement.totals } : undefined,
  };
}

/** The run's history once the database recorded the stale token being rejected (or after a bounded wait). */
async function historyWithStaleRejection(
  describe: () => Promise<RunDetails>,
  stall: StallRecord | undefined,
): Promise<RunDetails> {
  const deadline = performance.now() + 5_000;
  for (;;) {
    const description = await describe();
    const token = stall?.staleToken.toString();
    const seen = description.events.some((e) => e.type === 'attempt:stale-rejected' && e.token === token);
    if (seen || token === undefined || performance.now() > deadline) return description;
    await delay(100);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
