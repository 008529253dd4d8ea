import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { formatMoney } from './currencies.js';
import { generateInvoiceCsv } from './data/generate-invoices.js';
import { InvalidBatchFileError, parseInvoiceCsv } from './parse-invoices.js';

const HEADER = 'invoice_number,customer,currency,amount_minor,due_date';
const committed = readFileSync(fileURLToPath(new URL('./data/invoices.csv', import.meta.url)), 'utf8');

describe('the committed invoice batch', () => {
  it('is exactly what the seeded generator produces', () => {
    expect(generateInvoiceCsv()).toBe(committed);
  });

  it('has 240 valid invoices in seven currencies and three malformed rows, reported by line', () => {
    const batch = parseInvoiceCsv(committed);
    expect(batch.rowsRead).toBe(243);
    expect(batch.invoices).toHaveLength(240);
    expect(new Set(batch.invoices.map((i) => i.currency))).toEqual(
      new Set(['USD', 'EUR', 'GBP', 'CHF', 'SEK', 'JPY', 'KWD']),
    );
    expect(batch.malformed.map((m) => [m.line, m.invoiceNumber])).toEqual([
      [39, 'INV-2026-00038'],
      [120, 'INV-2026-00119'],
      [203, 'INV-2026-00202'],
    ]);
    expect(batch.malformed[0]?.reason).toMatch(
      /^amount_minor "1249\.50" must be a whole number of minor units/,
    );
    expect(batch.malformed[1]?.reason).toMatch(/^currency "SKR" is not a supported currency/);
    expect(batch.malformed[2]?.reason).toBe('due_date "2026-02-30" is not a calendar date');
    // A customer name with a comma survives quoting.
    expect(batch.invoices.some((i) => i.customer.includes('Co., Ltd.'))).toBe(true);
  });
});

describe('parseInvoiceCsv', () => {
  it('gives each row the line it starts on, also after a quoted field that spans lines', () => {
    const batch = parseInvoiceCsv(
      [
        HEADER,
        'INV-2026-00001,"Two-line\nName, Inc.",USD,1999,2026-01-31',
        'INV-2026-00002,Kōbe Foods K.K.,JPY,480000,2026-02-28',
        '',
        'INV-2026-00003,Gulf Pearl Logistics Co. W.L.L.,KWD,125750,2026-03-01',
      ].join('\n'),
    );
    expect(batch.malformed).toEqual([]);
    expect(batch.invoices.map((i) => [i.line, i.invoiceNumber, i.amountMinor])).toEqual([
      [2, 'INV-2026-00001', 1999],
      [4, 'INV-2026-00002', 480000],
      [6, 'INV-2026-00003', 125750],
    ]);
  });

  it('reports a short row, an empty customer, a zero amount and a repeated invoice number without dropping any', () => {
    const batch = parseInvoiceCsv(
      [
        HEADER,
        'INV-2026-00001,Acme Inc.,USD,100,2026-01-01',
        'INV-2026-00002,Acme Inc.,USD',
        'INV-2026-00003,,EUR,100,2026-01-01',
        'INV-2026-00004,Acme Inc.,USD,0,2026-01-01',
        'INV-2026-00001,Acme Inc.,USD,100,2026-01-01',
      ].join('\n'),
    );
    expect(batch.rowsRead).toBe(5);
    expect(batch.invoices.map((i) => i.line)).toEqual([2]);
    expect(batch.malformed).toEqual([
      {
        line: 3,
        invoiceNumber: 'INV-2026-00002',
        reason: expect.stringMatching(/^has 3 fields, expected 5/) as string,
      },
      { line: 4, invoiceNumber: 'INV-2026-00003', reason: 'customer "" is empty' },
      { line: 5, invoiceNumber: 'INV-2026-00004', reason: 'amount_minor "0" must be greater than zero' },
      {
        line: 6,
        invoiceNumber: 'INV-2026-00001',
        reason: 'invoice_number "INV-2026-00001" already appeared on line 2',
      },
    ]);
  });

  it('refuses a file whose header is not the expected one', () => {
    expect(() => parseInvoiceCsv('number,customer\nINV-2026-00001,Acme')).toThrow(InvalidBatchFileError);
    expect(() => parseInvoiceCsv(`${HEADER}\n`)).toThrow(/no invoice rows/);
  });
});

describe('formatMoney', () => {
  it('places the decimal point by the currency’s minor units', () => {
    expect(formatMoney(123456789, 'USD')).toBe('USD 1,234,567.89');
    expect(formatMoney(480000, 'JPY')).toBe('JPY 480,000');
    expect(formatMoney(125750, 'KWD')).toBe('KWD 125.750');
    expect(formatMoney(5, 'EUR')).toBe('EUR 0.05');
  });
});
