/**
 * Generates `invoices.csv` next to this file: 240 invoices from 72 recurring customers in seven currencies, plus
 * three deliberately malformed rows (a decimal amount, an unknown currency code, an impossible due date) so the
 * demo can show how bad rows are reported. Deterministic: a seeded PRNG, so running it again rewrites the same
 * bytes. The CSV is committed; run this only to change it:
 *
 *   pnpm --filter @palisade/examples invoices:generate
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mulberry32 } from '../../shared/seeded-random.js';
import { CURRENCIES, type CurrencyCode } from '../currencies.js';

const SEED = 0x20260401;
const VALID_ROWS = 240;
const CUSTOMERS = 72;
const HEADER = ['invoice_number', 'customer', 'currency', 'amount_minor', 'due_date'] as const;

/** Where customers are, the currency they are billed in, and how businesses there are named. */
const REGIONS: readonly {
  currency: CurrencyCode;
  weight: number;
  stems: string[];
  trades: string[];
  forms: string[];
}[] = [
  {
    currency: 'USD',
    weight: 28,
    stems: ['Blue Ridge', 'Cascade', 'Harbor Point', 'Lone Star', 'Redwood', 'Prairie Wind', 'Brightwater'],
    trades: [
      'Outfitters',
      'Analytics',
      'Logistics',
      'Dental Group',
      'Coffee Roasters',
      'Software',
      'Builders',
    ],
    forms: ['Inc.', 'LLC', 'Corp.', 'Co.'],
  },
  {
    currency: 'EUR',
    weight: 10,
    stems: ['Müller', 'Schröder', 'Hoffmann', 'Nordlicht', 'Weißenberg'],
    trades: ['Maschinenbau', 'Logistik', 'Feinkost', 'Elektrotechnik'],
    forms: ['GmbH', 'KG', 'AG'],
  },
  {
    currency: 'EUR',
    weight: 8,
    stems: ['Lefèvre', 'Moreau', 'Lumière', 'Durand & Fils'],
    trades: ['Distribution', 'Transports', 'Conseil', 'Boulangerie'],
    forms: ['SARL', 'SAS'],
  },
  {
    currency: 'EUR',
    weight: 6,
    stems: ['Van der Berg', 'De Vries', 'Jansen', 'Bakker'],
    trades: ['Bouwtechniek', 'Logistiek', 'Installatie'],
    forms: ['B.V.'],
  },
  {
    currency: 'EUR',
    weight: 6,
    stems: ['Ferrari', 'Bianchi', 'García Ortega', 'Navarro'],
    trades: ['Ricambi', 'Arredamenti', 'Asesores', 'Construcciones'],
    forms: ['S.r.l.', 'S.p.A.', 'S.L.'],
  },
  {
    currency: 'GBP',
    weight: 14,
    stems: ['Ashworth', 'Pemberton', 'Whitcombe', "O'Neill", 'Harrow & Finch', 'Blackthorn'],
    trades: ['Joinery', 'Haulage', 'Consulting', 'Bakery', 'Surveyors', 'Print Works'],
    forms: ['Ltd', 'plc', 'LLP'],
  },
  {
    currency: 'JPY',
    weight: 10,
    stems: ['Yamada', 'Suzuki', 'Ōsaka', 'Sakura', 'Takahashi', 'Kōbe'],
    trades: ['Shōji', 'Seisakusho', 'Trading', 'Electronics', 'Foods'],
    forms: ['K.K.', 'Co., Ltd.', 'G.K.'],
  },
  {
    currency: 'CHF',
    weight: 7,
    stems: ['Zürcher', 'Bernina', 'Alpenblick', 'Rheintal', 'Léman'],
    trades: ['Uhren', 'Treuhand', 'Präzisionstechnik', 'Käserei'],
    forms: ['AG', 'GmbH', 'SA'],
  },
  {
    currency: 'SEK',
    weight: 7,
    stems: ['Lindqvist', 'Björk', 'Nordström', 'Åkesson', 'Sjöberg'],
    trades: ['Bygg', 'Konsult', 'Design', 'Transport', 'Snickeri'],
    forms: ['AB', 'Handelsbolag'],
  },
  {
    currency: 'KWD',
    weight: 4,
    stems: ['Al-Ghanim', 'Gulf Pearl', 'Al-Mutawa', 'Al-Shaya', 'Dasman'],
    trades: ['General Trading', 'Contracting', 'Logistics', 'Marine Services'],
    forms: ['Co. W.L.L.', 'K.S.C.C.'],
  },
];

/** The range of one invoice in major units of each currency (drawn log-uniformly). */
const RANGE: Record<CurrencyCode, { min: number; max: number }> = {
  EUR: { min: 20, max: 40_000 },
  USD: { min: 25, max: 48_000 },
  GBP: { min: 15, max: 30_000 },
  JPY: { min: 3_000, max: 5_000_000 },
  CHF: { min: 30, max: 35_000 },
  SEK: { min: 250, max: 400_000 },
  KWD: { min: 10, max: 12_000 },
};

type Random = () => number;

const pick = <T>(random: Random, items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;

function pickRegion(random: Random): (typeof REGIONS)[number] {
  let r = random() * REGIONS.reduce((sum, region) => sum + region.weight, 0);
  for (const region of REGIONS) {
    r -= region.weight;
    if (r < 0) return region;
  }
  return REGIONS[0] as (typeof REGIONS)[number];
}

/** An amount in minor units: log-uniform in the currency's range, often a round number, as real invoices are. */
function amountMinor(random: Random, currency: CurrencyCode): number {
  const { min, max } = RANGE[currency];
  const major = Math.exp(Math.log(min) + random() * (Math.log(max) - Math.log(min)));
  const scale = 10 ** CURRENCIES[currency].minorUnits;
  const roll = random();
  if (roll < 0.35) return Math.round(major) * scale; // whole units
  if (roll < 0.5) return Math.round(major / 50) * 50 * scale || scale * 50; // a round figure
  return Math.max(1, Math.round(major * scale)); // an exact figure down to the minor unit
}

interface Customer {
  readonly name: string;
  readonly currency: CurrencyCode;
}

function makeCustomers(random: Random): Customer[] {
  const seen = new Set<string>();
  const customers: Customer[] = [];
  while (customers.length < CUSTOMERS) {
    const region = pickRegion(random);
    const name = `${pick(random, region.stems)} ${pick(random, region.trades)} ${pick(random, region.forms)}`;
    if (seen.has(name)) continue;
    seen.add(name);
    customers.push({ name, currency: region.currency });
  }
  return customers;
}

function dueDate(random: Random): string {
  const start = Date.UTC(2026, 0, 5);
  const end = Date.UTC(2026, 5, 30);
  const day = Math.floor(random() * ((end - start) / 86_400_000 + 1));
  return new Date(start + day * 86_400_000).toISOString().slice(0, 10);
}

/** RFC 4180: quote a field holding a comma, a quote or a line break; double the quotes inside. */
function csvField(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

/** The batch as CSV text; the same `seed` gives the same bytes. */
export function generateInvoiceCsv(seed = SEED): string {
  const random = mulberry32(seed);
  const customers = makeCustomers(random);
  // A few customers get most invoices, as in real billing (a Zipf-like draw over the customer list).
  const weights = customers.map((_, i) => 1 / (i + 1) ** 0.6);
  const total = weights.reduce((a, b) => a + b, 0);
  const pickCustomer = (): Customer => {
    let r = random() * total;
    for (const [i, w] of weights.entries()) {
      r -= w;
      if (r < 0) return customers[i] as Customer;
    }
    return customers[0] as Customer;
  };

  const rows: string[][] = [];
  for (let i = 0; i < VALID_ROWS; i++) {
    const c = pickCustomer();
    rows.push([c.name, c.currency, String(amountMinor(random, c.currency)), dueDate(random)]);
  }
  // Three malformed rows, as they turn up in real exports: an amount typed in major units, a retired currency
  // code, a date that does not exist. They keep their place (and invoice number) so their line numbers are stable.
  rows.splice(37, 0, ['Pemberton Haulage Ltd', 'GBP', '1249.50', '2026-03-14']);
  rows.splice(118, 0, ['Nordström Bygg AB', 'SKR', '1250000', '2026-04-02']);
  rows.splice(201, 0, ['Müller Feinkost GmbH', 'EUR', '89000', '2026-02-30']);

  const lines = [HEADER.join(',')];
  for (const [i, row] of rows.entries()) {
    const number = `INV-2026-${String(i + 1).padStart(5, '0')}`;
    lines.push([number, ...row].map(csvField).join(','));
  }
  return `${lines.join('\n')}\n`;
}

/** Where the committed batch lives. */
export const INVOICES_CSV_PATH = fileURLToPath(new URL('./invoices.csv', import.meta.url));

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(INVOICES_CSV_PATH, generateInvoiceCsv());
  console.log(`wrote ${INVOICES_CSV_PATH}`);
}
