import type { RunDetails } from '@palisade/engine';
import { AttemptAbortedError, LeaseLostError } from '@palisade/sdk';
import { CURRENCIES, isCurrencyCode } from './currencies.js';
import type { MalformedRow, ParsedBatch } from './parse-invoices.js';
import type { Charge } from './payment-provider.js';
import type { StallRecord } from './stall-fault.js';
import { describeError, errorCode } from './timeline.js';
import type { SettlementReport } from './workflow.js';

/** One verified property of the run. */
export interface DemoCheck {
  readonly name: string;
  readonly ok: boolean;
  readonly detail: string;
}

/** Per-currency totals as each party sees them, in minor units. */
export interface CurrencyTotal {
  readonly currency: string;
  readonly minorUnits: number;
  readonly invoices: number;
  readonly csvMinor: number;
  readonly providerMinor: number;
  readonly ledgerMinor: number;
  readonly settledMinor: number;
}

/** The stale attempt's write, as refused: who held the stale token and who held the current one. */
export interface StaleWriteRejection {
  readonly invoiceNumber: string;
  readonly stepId: string;
  readonly staleWorker: string;
  readonly staleToken: string;
  readonly staleEpoch: number;
  readonly currentWorker: string | null;
  readonly currentToken: string | null;
  readonly currentEpoch: number | null;
  /**
   * Who refused it: `database` — the fence statement at the end of its transaction matched nothing (LeaseLostError,
   * operation `fenced-transaction`); `worker` — the engine refused it before sending any SQL, because the attempt
   * had already been given up (its local lease deadline passed: AttemptAbortedError; or the database had rejected
   * one of its earlier writes, such as a heartbeat: LeaseLostError of that operation).
   */
  readonly refusedBy: 'database' | 'worker' | 'not refused';
  readonly error: { readonly name: string; readonly code: string | undefined; readonly message: string };
  /** The `attempt:stale-rejected` event the database recorded for the stale token, if any. */
  readonly recorded: {
    readonly operation: string;
    readonly staleToken: string;
    readonly currentToken: string;
    readonly reason: string;
  } | null;
  /** The fencing token of the ledger entry of this invoice (the attempt whose write counted). */
  readonly ledgerToken: string | null;
}

/** The ledger and invoice rows of the batch, as read back. */
export interface LedgerRow {
  readonly invoiceNumber: string;
  readonly chargeId: string;
  readonly currency: string;
  readonly amountMinor: number;
  readonly fencingToken: bigint;
  readonly workerId: string;
}
export interface InvoiceRow {
  readonly invoiceNumber: string;
  readonly status: string;
  readonly chargeId: string | null;
}

export interface VerifyInput {
  /** The CSV parsed independently of the workflow. */
  readonly csv: ParsedBatch;
  readonly report: SettlementReport | undefined;
  readonly storedMalformed: readonly MalformedRow[] | undefined;
  /** The provider's charges for this batch (by idempotency key prefix). */
  readonly charges: readonly Charge[];
  readonly keyOf: (invoiceNumber: string) => string;
  readonly ledger: readonly LedgerRow[];
  readonly invoices: readonly InvoiceRow[];
  readonly settlement:
    { invoiceCount: number; totals: { currency: string; amountMinor: number }[] } | undefined;
  readonly stall: StallRecord | undefined;
  readonly description: RunDetails | undefined;
}

export interface Verified {
  readonly checks: DemoCheck[];
  readonly totals: CurrencyTotal[];
  readonly rejection: StaleWriteRejection | undefined;
}

const fmt = (n: number): string => n.toLocaleString('en');

function check(name: string, ok: boolean, detail: string): DemoCheck {
  return { name, ok, detail };
}

function tally<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    groups.set(k, [...(groups.get(k) ?? []), item]);
  }
  return groups;
}

function sumBy<T>(
  items: readonly T[],
  currency: string,
  pick: (item: T) => { currency: string; amountMinor: number },
): number {
  return items.map(pick).reduce((total, r) => (r.currency === currency ? total + r.amountMinor : total), 0);
}

/** Check the run against the CSV, the provider's table, the ledger, the invoices and the engine's history. */
export function verifySettlement(input: VerifyInput): Verified {
  const { csv, report, charges, ledger, invoices, stall, description } = input;
  const expected = csv.invoices;
  const checks: DemoCheck[] = [];

  // 1. Every CSV row is accounted for: charged, or reported with its line number.
  const reported = report?.malformed ?? [];
  const sameMalformed =
    reported.length === csv.malformed.length &&
    reported.every((m, i) => m.line === csv.malformed[i]?.line && m.reason === csv.malformed[i]?.reason) &&
    (input.storedMalformed?.length ?? -1) === csv.malformed.length;
  checks.push(
    check(
      'every CSV row is charged or reported',
      report !== undefined &&
        report.rowsRead === csv.rowsRead &&
        report.charged.length === expected.length &&
        expected.length + csv.malformed.length === csv.rowsRead &&
        sameMalformed,
      `${fmt(csv.rowsRead)} rows: ${fmt(report?.charged.length ?? 0)} charged, ${reported.length} malformed reported ` +
        `on line${reported.length === 1 ? '' : 's'} ${reported.map((m) => m.line).join(', ') || '—'} (and stored with the batch)`,
    ),
  );

  // 2. One charge per invoice at the provider, with the invoice's amount, currency and customer.
  const chargesByKey = tally(charges, (c) => c.idempotencyKey);
  const chargeMismatches = expected.filter((inv) => {
    const found = chargesByKey.get(input.keyOf(inv.invoiceNumber)) ?? [];
    const c = found[0];
    return (
      found.length !== 1 ||
      !c ||
      c.amountMinor !== inv.amountMinor ||
      c.currency !== inv.currency ||
      c.customer !== inv.customer
    );
  });
  const replays = charges.reduce((n, c) => n + (c.requestCount - 1), 0);
  checks.push(
    check(
      'one charge per invoice at the provider',
      charges.length === expected.length && chargeMismatches.length === 0,
      `${fmt(charges.length)} charges for ${fmt(expected.length)} invoices; ${replays} repeated request(s) got the ` +
        `same charge back${chargeMismatches.length ? `; wrong or missing: ${chargeMismatches.map((i) => i.invoiceNumber).join(', ')}` : ''}`,
    ),
  );

  // 3. One ledger row per invoice, matching the provider's charge and the CSV.
  const ledgerByInvoice = tally(ledger, (l) => l.invoiceNumber);
  const ledgerMismatches = expected.filter((inv) => {
    const rows = ledgerByInvoice.get(inv.invoiceNumber) ?? [];
    const row = rows[0];
    const charge = chargesByKey.get(input.keyOf(inv.invoiceNumber))?.[0];
    return (
      rows.length !== 1 ||
      !row ||
      row.amountMinor !== inv.amountMinor ||
      row.currency !== inv.currency ||
      row.chargeId !== charge?.id
    );
  });
  const duplicates = [...ledgerByInvoice].filter(([, rows]) => rows.length > 1).map(([n]) => n);
  checks.push(
    check(
      'one ledger row per invoice',
      ledger.length === expected.length && ledgerMismatches.length === 0,
      `${fmt(ledger.length)} ledger rows for ${fmt(expected.length)} invoices` +
        (duplicates.length ? `; DUPLICATES for ${duplicates.join(', ')}` : '') +
        (ledgerMismatches.length && !duplicates.length
          ? `; wrong or missing: ${ledgerMismatches.map((i) => i.invoiceNumber).join(', ')}`
          : ''),
    ),
  );

  // 4. Every invoice is marked paid with the charge the ledger recorded.
  const unpaid = invoices.filter(
    (i) => i.status !== 'paid' || i.chargeId !== ledgerByInvoice.get(i.invoiceNumber)?.[0]?.chargeId,
  );
  checks.push(
    check(
      'every invoice is paid with its ledger charge',
      invoices.length === expected.length && unpaid.length === 0,
      `${fmt(invoices.length - unpaid.length)} of ${fmt(expected.length)} invoices paid` +
        (unpaid.length ? `; not: ${unpaid.map((i) => i.invoiceNumber).join(', ')}` : ''),
    ),
  );

  // 5. Totals per currency agree: CSV, provider, ledger, settlement.
  const currencies = [...new Set(expected.map((i) => i.currency))].sort();
  const totals: CurrencyTotal[] = currencies.map((currency) => ({
    currency,
    minorUnits: isCurrencyCode(currency) ? CURRENCIES[currency].minorUnits : 2,
    invoices: expected.filter((i) => i.currency === currency).length,
    csvMinor: sumBy(expected, currency, (i) => i),
    providerMinor: sumBy(charges, currency, (c) => c),
    ledgerMinor: sumBy(ledger, currency, (l) => l),
    settledMinor: sumBy(input.settlement?.totals ?? [], currency, (t) => t),
  }));
  const totalsAgree =
    totals.every(
      (t) => t.csvMinor === t.providerMinor && t.csvMinor === t.ledgerMinor && t.csvMinor === t.settledMinor,
    ) &&
    (input.settlement?.totals.length ?? 0) === totals.length &&
    input.settlement?.invoiceCount === expected.length;
  checks.push(
    check(
      'totals match the CSV',
      totalsAgree,
      `${totals.length} currencies; CSV = provider = ledger = settlement for ` +
        `${totals.filter((t) => t.csvMinor === t.providerMinor && t.csvMinor === t.ledgerMinor && t.csvMinor === t.settledMinor).length}`,
    ),
  );

  // 6. The stalled invoice was finished by another worker, under a newer token.
  const step = stall ? description?.steps.find((s) => s.id === stall.stepId) : undefined;
  const attempts = step?.attempts ?? [];
  const completed = attempts.find((a) => a.outcome === 'completed');
  const staleAttempt = stall ? attempts.find((a) => a.token === stall.staleToken.toString()) : undefined;
  const takenOver =
    stall !== undefined &&
    staleAttempt !== undefined &&
    completed !== undefined &&
    completed.workerId !== stall.staleWorker &&
    BigInt(completed.token) > stall.staleToken &&
    completed.epoch > stall.staleEpoch;
  checks.push(
    check(
      'the stalled invoice was reclaimed and finished by another worker',
      takenOver,
      stall && completed
        ? `${stall.invoiceNumber}: ${stall.staleWorker} epoch ${stall.staleEpoch} token ${stall.staleToken} ` +
            `(${staleAttempt?.outcome ?? '?'}) → ${completed.workerId} epoch ${completed.epoch} token ${completed.token} (completed)`
        : 'no stall happened or the step never completed',
    ),
  );

  // 7. The stalled attempt's fenced write was refused, and nothing it wrote counts.
  const rejection = stall ? describeRejection(stall, input, completed) : undefined;
  const staleLedger = stall ? ledger.filter((l) => l.fencingToken === stall.staleToken) : [];
  checks.push(
    check(
      "the stalled worker's fenced write was rejected",
      rejection !== undefined &&
        rejection.refusedBy !== 'not refused' &&
        staleLedger.length === 0 &&
        rejection.ledgerToken !== null &&
        rejection.ledgerToken === rejection.currentToken,
      rejection
        ? `${rejection.invoiceNumber}: stale token ${rejection.staleToken} (${rejection.staleWorker}) refused by the ` +
            `${rejection.refusedBy}; current token ${rejection.currentToken ?? '?'} (${rejection.currentWorker ?? '?'}) ` +
            `wrote the ledger entry; ${staleLedger.length} row(s) carry the stale token`
        : 'the stalled attempt never tried to write',
    ),
  );

  // 8. The engine's history, written by the database, tells the same story: the new owner's claim names the stale
  // token it reclaimed from, and the stale attempt ended without an outcome of its own.
  const reclaim = stall
    ? description?.events.find(
        (e) =>
          e.type === 'attempt:claimed' &&
          e.stepId === stall.stepId &&
          (e.data as { reclaimedFromToken?: unknown } | null)?.reclaimedFromToken ===
            stall.staleToken.toString(),
      )
    : undefined;
  const staleEnded = staleAttempt?.outcome === 'lease_expired' || staleAttempt?.outcome === 'rejected_stale';
  checks.push(
    check(
      'the history records the reclaim from the stale token',
      reclaim !== undefined && reclaim.workerId !== stall?.staleWorker && staleEnded,
      reclaim && stall
        ? `attempt:claimed by ${reclaim.workerId} · epoch ${reclaim.epoch} · token ${reclaim.token} · reclaimed from ` +
            `token ${stall.staleToken} (${staleAttempt?.outcome ?? '?'})` +
            (rejection?.recorded
              ? `; attempt:stale-rejected (${rejection.recorded.operation}, ${rejection.recorded.reason}): stale token ` +
                `${rejection.recorded.staleToken}, current token ${rejection.recorded.currentToken}`
              : '')
        : 'no claim in the history reclaims the stale token',
    ),
  );

  return { checks, totals, rejection };
}

function describeRejection(
  stall: StallRecord,
  input: VerifyInput,
  current: { workerId: string; token: string; epoch: number } | undefined,
): StaleWriteRejection {
  const error = stall.error;
  const staleToken = stall.staleToken.toString();
  // The database's record of the stale token being turned away: its fenced write if that reached the database,
  // else whatever else of it did (a heartbeat sent before the stall and delivered after it).
  const rejected = (input.description?.events ?? []).filter(
    (e) => e.type === 'attempt:stale-rejected' && e.token === staleToken,
  );
  const event =
    rejected.find((e) => (e.data as { operation?: unknown } | null)?.operation === 'fenced-transaction') ??
    rejected[0];
  const data = (event?.data ?? {}) as {
    operation?: string;
    staleToken?: string;
    currentToken?: string;
    reason?: string;
  };
  const ledgerRow = input.ledger.find((l) => l.invoiceNumber === stall.invoiceNumber);
  return {
    invoiceNumber: stall.invoiceNumber,
    stepId: stall.stepId,
    staleWorker: stall.staleWorker,
    staleToken,
    staleEpoch: stall.staleEpoch,
    currentWorker: current?.workerId ?? null,
    currentToken:
      error instanceof LeaseLostError && error.currentToken !== null
        ? error.currentToken.toString()
        : (current?.token ?? null),
    currentEpoch: current?.epoch ?? null,
    refusedBy:
      stall.outcome !== 'refused'
        ? 'not refused'
        : error instanceof LeaseLostError && error.operation === 'fenced-transaction'
          ? 'database'
          : error instanceof LeaseLostError || error instanceof AttemptAbortedError
            ? 'worker'
            : 'not refused',
    error: {
      name: error instanceof Error ? error.name : 'none',
      code: errorCode(error),
      message: error === undefined ? '' : describeError(error),
    },
    recorded: event
      ? {
          operation: data.operation ?? '?',
          staleToken: data.staleToken ?? '?',
          currentToken: data.currentToken ?? '?',
          reason: data.reason ?? '?',
        }
      : null,
    ledgerToken: ledgerRow ? ledgerRow.fencingToken.toString() : null,
  };
}
