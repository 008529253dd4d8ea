import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  INVOICE_SETTLEMENT_DEMO,
  parseInvoiceCsv,
  runInvoiceSettlementDemo,
  type InvoiceSettlementDemoResult,
} from '@palisade/examples/invoice-settlement';
import { useTestDatabase } from '../support/postgres.js';

/** Every check the demo prints, in order: each must be there and pass. */
const CHECKS = [
  'every CSV row is charged or reported',
  'one charge per invoice at the provider',
  'one ledger row per invoice',
  'every invoice is paid with its ledger charge',
  'totals match the CSV',
  'the stalled invoice was reclaimed and finished by another worker',
  "the stalled worker's fenced write was rejected",
  'the history records the reclaim from the stale token',
];
/** On PostgreSQL only (fence-stall.ts): the database's fence refusing a zombie's write. */
const POSTGRES_CHECKS = [
  ...CHECKS,
  "the database's fence refused a write that passed the worker's last local check",
];

/** A PGlite boot plus 240 charges on a busy 2-core machine: minutes, not seconds. */
const DEMO_TIMEOUT_MS = 300_000;

const batch = parseInvoiceCsv(readFileSync(INVOICE_SETTLEMENT_DEMO.csvPath, 'utf8'));

async function runDemo(
  databaseUrl?: string,
): Promise<{ result: InvoiceSettlementDemoResult; printed: string[] }> {
  const printed: string[] = [];
  const result = await runInvoiceSettlementDemo({
    ...(databaseUrl ? { databaseUrl } : {}),
    log: (line) => printed.push(line),
  });
  return { result, printed };
}

/** The assertions are the demo's own checks, plus the numbers behind them, recomputed here from the CSV. */
function expectSettledBatch({
  result,
  printed,
}: {
  result: InvoiceSettlementDemoResult;
  printed: string[];
}): void {
  const failed = result.checks.filter((c) => !c.ok);
  expect(failed, `failed checks; the demo printed:\n${printed.join('\n')}`).toEqual([]);
  expect(result.checks.map((c) => c.name)).toEqual(result.database === 'postgres' ? POSTGRES_CHECKS : CHECKS);
  expect(result.ok).toBe(true);
  for (const c of result.checks) expect(printed).toContain(`  ✓ ${c.name} — ${c.detail}`);

  expect(result.counts).toEqual({
    csvRows: 243,
    validInvoices: 240,
    malformedRows: 3,
    providerCharges: 240,
    providerReplays: expect.any(Number) as number,
    ledgerRows: 240,
    paidInvoices: 240,
  });
  // The stalled invoice was charged twice with one key and got one charge back (other invoices the stalled
  // worker had in flight may have been replayed too).
  expect(result.counts.providerReplays).toBeGreaterThanOrEqual(1);
  expect(result.malformed).toEqual(batch.malformed);
  expect(result.malformed.map((m) => m.line)).toEqual([39, 120, 203]);
  expect(
    printed.some((l) => l.includes('line 120 (INV-2026-00119): currency "SKR" is not a supported currency')),
  ).toBe(true);

  const byCurrency = new Map<string, { invoices: number; minor: number }>();
  for (const i of batch.invoices) {
    const t = byCurrency.get(i.currency) ?? { invoices: 0, minor: 0 };
    byCurrency.set(i.currency, { invoices: t.invoices + 1, minor: t.minor + i.amountMinor });
  }
  expect(result.totals.map((t) => t.currency)).toEqual([...byCurrency.keys()].sort());
  for (const t of result.totals) {
    const expected = byCurrency.get(t.currency);
    expect(t, t.currency).toMatchObject({
      invoices: expected?.invoices,
      csvMinor: expected?.minor,
      providerMinor: expected?.minor,
      ledgerMinor: expected?.minor,
      settledMinor: expected?.minor,
    });
  }
  expect(result.totals.find((t) => t.currency === 'JPY')?.minorUnits).toBe(0);
  expect(result.totals.find((t) => t.currency === 'KWD')?.minorUnits).toBe(3);
  expect(result.report?.settlement.invoiceCount).toBe(240);

  const r = result.rejection;
  expect(r).toBeDefined();
  if (!r) return;
  expect(r.invoiceNumber).toBe(INVOICE_SETTLEMENT_DEMO.stalledInvoice);
  expect(r.refusedBy === 'worker' || r.refusedBy === 'database').toBe(true);
  // Refused by the worker (its context was poisoned when its local lease deadline passed) or, were the write to reach
  // the database, by the fence; either way with a Palisade error, never a silent success or a constraint error.
  expect(r.error.code).toMatch(
    r.refusedBy === 'database' ? /^LEASE_LOST$/ : /^(ATTEMPT_ABORTED|LEASE_LOST)$/,
  );
  expect(r.currentToken).not.toBeNull();
  expect(BigInt(r.currentToken ?? 0)).toBeGreaterThan(BigInt(r.staleToken));
  expect(r.currentEpoch ?? 0).toBeGreaterThan(r.staleEpoch);
  expect(r.currentWorker).not.toBe(r.staleWorker);
  expect(INVOICE_SETTLEMENT_DEMO.chargeWorkers).toContain(r.staleWorker);
  expect(r.ledgerToken).toBe(r.currentToken);
  expect(printed).toContain(`  stale   token ${r.staleToken} · epoch ${r.staleEpoch} · ${r.staleWorker}`);
  expect(
    printed.some((l) => l.includes(`fenced write for ${r.invoiceNumber} REFUSED (token ${r.staleToken})`)),
  ).toBe(true);
}

describe('invoice-settlement example', () => {
  describe('on real PostgreSQL', () => {
    const databaseUrl = useTestDatabase('invoice_settlement');

    it(
      'settles the batch exactly once per invoice while a stalled worker is fenced out',
      async () => {
        expectSettledBatch(await runDemo(databaseUrl()));
      },
      DEMO_TIMEOUT_MS,
    );
  });

  describe('on the embedded database (PGlite)', () => {
    it(
      'settles the batch exactly once per invoice while a stalled worker is fenced out',
      async () => {
        expectSettledBatch(await runDemo());
      },
      DEMO_TIMEOUT_MS,
    );
  });
});
