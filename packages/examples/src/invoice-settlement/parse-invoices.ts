import { parse, type CsvError } from 'csv-parse/sync';
import { z } from 'zod';
import { CURRENCIES, CURRENCY_CODES, isCurrencyCode, type CurrencyCode } from './currencies.js';

/** The columns an invoice CSV must have, in this order. */
export const INVOICE_CSV_COLUMNS = [
  'invoice_number',
  'customer',
  'currency',
  'amount_minor',
  'due_date',
] as const;

/** One valid invoice of a batch, with the CSV line it came from. */
export interface ParsedInvoice {
  readonly line: number;
  readonly invoiceNumber: string;
  readonly customer: string;
  readonly currency: CurrencyCode;
  /** Integer amount in the currency's minor unit (cents, pence, yen, fils). */
  readonly amountMinor: number;
  /** `YYYY-MM-DD`. */
  readonly dueDate: string;
}

/** A row that was reported and skipped, never silently dropped. */
export interface MalformedRow {
  /** 1-based line number in the file (the header is line 1). */
  readonly line: number;
  readonly invoiceNumber: string | null;
  /** What is wrong, naming the column and the value. */
  readonly reason: string;
}

export interface ParsedBatch {
  /** Data rows read (header and blank lines not counted). */
  readonly rowsRead: number;
  readonly invoices: readonly ParsedInvoice[];
  readonly malformed: readonly MalformedRow[];
}

/** Thrown when the file as a whole cannot be a batch (wrong header, no rows). */
export class InvalidBatchFileError extends Error {
  override readonly name = 'InvalidBatchFileError';
}

/** Largest amount accepted, in minor units: above it a row is far more likely a typo than an invoice. */
const MAX_AMOUNT_MINOR = 10_000_000_000;

function isCalendarDate(value: string): boolean {
  const date = new Date(`${value}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === value;
}

const rowSchema = z.object({
  invoice_number: z.string().regex(/^INV-\d{4}-\d{5}$/, 'must look like INV-2026-00001'),
  customer: z.string().min(1, 'is empty').max(200, 'is longer than 200 characters'),
  currency: z.string().refine(isCurrencyCode, `is not a supported currency (${CURRENCY_CODES.join(', ')})`),
  amount_minor: z
    .string()
    .regex(/^\d+$/, 'must be a whole number of minor units (cents, pence, yen…), with no decimal point')
    .transform(Number)
    .refine((n) => n > 0, 'must be greater than zero')
    .refine((n) => n <= MAX_AMOUNT_MINOR, `must be at most ${MAX_AMOUNT_MINOR.toLocaleString('en')}`),
  due_date: z
    .string()
    .regex(/^\d{4}-\d{2}-\d{2}$/, 'must be a date written YYYY-MM-DD')
    .refine(isCalendarDate, 'is not a calendar date'),
});

/** Why a field failed, in words that name the column and quote the value. */
function describeIssues(
  issues: readonly z.core.$ZodIssue[],
  record: Record<string, string | undefined>,
): string {
  return issues
    .map((issue) => {
      const column = String(issue.path[0] ?? 'row');
      const value = record[column];
      let text = `${column} ${value === undefined ? 'is missing' : `"${value}" ${issue.message}`}`;
      if (column === 'amount_minor' && value !== undefined && /^\d+\.\d+$/.test(value)) {
        const currency = record.currency;
        if (currency !== undefined && isCurrencyCode(currency)) {
          const units = CURRENCIES[currency].minorUnits;
          text += ` — ${currency} has ${units} decimals; was the amount exported in major units?`;
        }
      }
      return text;
    })
    .join('; ');
}

/**
 * Parse and validate an invoice batch in CSV (RFC 4180, UTF-8, header row {@link INVOICE_CSV_COLUMNS}). Every
 * row ends up either in `invoices` or in `malformed` with its line number and the reason — a row with the wrong
 * number of fields, a bad value in any column, or an invoice number seen earlier in the file.
 * @throws InvalidBatchFileError when the header is not the expected one or there are no data rows.
 */
export function parseInvoiceCsv(csv: string): ParsedBatch {
  const malformed: MalformedRow[] = [];
  const records = parse(csv, {
    bom: true,
    info: true,
    raw: true,
    skip_empty_lines: true,
    relax_column_count: true,
    skip_records_with_error: true,
    on_skip: (error: CsvError | undefined, raw: string | undefined) => {
      malformed.push({
        line: typeof error?.lines === 'number' ? error.lines : 0,
        invoiceNumber: raw?.split(',')[0]?.trim() || null,
        reason: `not valid CSV: ${error?.message ?? 'unreadable record'}`,
      });
      return undefined;
    },
  }) as unknown as { record: string[]; info: { lines: number }; raw: string }[];

  const [header, ...rows] = records;
  const expected = INVOICE_CSV_COLUMNS.join(',');
  if (!header || header.record.map((h) => h.trim()).join(',') !== expected) {
    throw new InvalidBatchFileError(
      `the first line must be the header "${expected}", got "${header?.record.join(',') ?? ''}"`,
    );
  }
  if (rows.length === 0) throw new InvalidBatchFileError('the file has a header but no invoice rows');

  const invoices: ParsedInvoice[] = [];
  const seen = new Map<string, number>();
  for (const { record, info, raw } of rows) {
    // info.lines is the line the record ends on, and a quoted field may span lines: count back over the line
    // breaks inside the record (raw also carries the blank lines skipped before it, and its own terminator).
    const body = raw.replace(/^(?:\r?\n)+/, '').replace(/\r?\n$/, '');
    const line = info.lines - (body.match(/\r?\n/g)?.length ?? 0);
    const fields = Object.fromEntries(INVOICE_CSV_COLUMNS.map((c, i) => [c, record[i]?.trim()]));
    const invoiceNumber = fields.invoice_number || null;
    if (record.length !== INVOICE_CSV_COLUMNS.length) {
      malformed.push({
        line,
        invoiceNumber,
        reason: `has ${record.length} fields, expected ${INVOICE_CSV_COLUMNS.length} (${INVOICE_CSV_COLUMNS.join(', ')})`,
      });
      continue;
    }
    const parsed = rowSchema.safeParse(fields);
    if (!parsed.success) {
      malformed.push({ line, invoiceNumber, reason: describeIssues(parsed.error.issues, fields) });
      continue;
    }
    const row = parsed.data;
    const earlier = seen.get(row.invoice_number);
    if (earlier !== undefined) {
      malformed.push({
        line,
        invoiceNumber,
        reason: `invoice_number "${row.invoice_number}" already appeared on line ${earlier}`,
      });
      continue;
    }
    seen.set(row.invoice_number, line);
    invoices.push({
      line,
      invoiceNumber: row.invoice_number,
      customer: row.customer,
      currency: row.currency,
      amountMinor: row.amount_minor,
      dueDate: row.due_date,
    });
  }
  malformed.sort((a, b) => a.line - b.line);
  return {
    rowsRead: rows.length + malformed.filter((m) => m.reason.startsWith('not valid CSV')).length,
    invoices,
    malformed,
  };
}
