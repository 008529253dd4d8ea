import {
  bigint,
  bigserial,
  date,
  integer,
  jsonb,
  pgSchema,
  primaryKey,
  text,
  timestamp,
} from 'drizzle-orm/pg-core';
import type { MalformedRow } from './parse-invoices.js';

/** Per-currency total of a settled batch, in minor units. */
export interface SettlementTotal {
  readonly currency: string;
  readonly invoices: number;
  readonly amountMinor: number;
}

/**
 * The billing tables of the example, in their own Postgres schema (next to the engine's): batches, invoices, the
 * ledger, and settlements. Defined with drizzle; {@link invoiceTablesDdl} creates them.
 *
 * The ledger deliberately has no unique key on the invoice: "one ledger row per invoice" is what the fencing
 * (and the activity's own check of the invoice's status) must achieve, and what the demo verifies — a unique
 * index would turn a stale writer's duplicate into a constraint error and hide whether the fence worked.
 */
export function invoiceTables(schemaName: string) {
  const schema = pgSchema(schemaName);

  const batches = schema.table('batches', {
    id: text('id').primaryKey(),
    sourceName: text('source_name').notNull(),
    rowsRead: integer('rows_read').notNull(),
    validCount: integer('valid_count').notNull(),
    malformed: jsonb('malformed').$type<MalformedRow[]>().notNull(),
    status: text('status').$type<'validated' | 'settled'>().notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    settledAt: timestamp('settled_at', { withTimezone: true }),
  });

  const invoices = schema.table(
    'invoices',
    {
      batchId: text('batch_id').notNull(),
      invoiceNumber: text('invoice_number').notNull(),
      customer: text('customer').notNull(),
      currency: text('currency').notNull(),
      amountMinor: bigint('amount_minor', { mode: 'number' }).notNull(),
      dueDate: date('due_date', { mode: 'string' }).notNull(),
      csvLine: integer('csv_line').notNull(),
      status: text('status').$type<'open' | 'paid'>().notNull().default('open'),
      chargeId: text('charge_id'),
      paidAt: timestamp('paid_at', { withTimezone: true }),
      /** Fencing token of the attempt whose fenced transaction marked it paid. */
      paidByToken: bigint('paid_by_token', { mode: 'bigint' }),
    },
    (t) => [primaryKey({ columns: [t.batchId, t.invoiceNumber] })],
  );

  const ledgerEntries = schema.table('ledger_entries', {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    batchId: text('batch_id').notNull(),
    invoiceNumber: text('invoice_number').notNull(),
    chargeId: text('charge_id').notNull(),
    currency: text('currency').notNull(),
    amountMinor: bigint('amount_minor', { mode: 'number' }).notNull(),
    /** The attempt that wrote it: fencing token, attempt number and worker. */
    fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
    attempt: integer('attempt').notNull(),
    workerId: text('worker_id').notNull(),
    writtenAt: timestamp('written_at', { withTimezone: true }).notNull().defaultNow(),
  });

  const settlements = schema.table('settlements', {
    batchId: text('batch_id').primaryKey(),
    invoiceCount: integer('invoice_count').notNull(),
    totals: jsonb('totals').$type<SettlementTotal[]>().notNull(),
    fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
    settledAt: timestamp('settled_at', { withTimezone: true }).notNull().defaultNow(),
  });

  return { schemaName, batches, invoices, ledgerEntries, settlements };
}

export type InvoiceTables = ReturnType<typeof invoiceTables>;

/** `"name"`, quoted as a SQL identifier. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The DDL of {@link invoiceTables}, idempotent (`IF NOT EXISTS`): run the statements in order. */
export function invoiceTablesDdl(schemaName: string): string[] {
  const s = quoteIdent(schemaName);
  return [
    `CREATE SCHEMA IF NOT EXISTS ${s}`,
    `CREATE TABLE IF NOT EXISTS ${s}.batches (
      id text PRIMARY KEY,
      source_name text NOT NULL,
      rows_read integer NOT NULL,
      valid_count integer NOT NULL,
      malformed jsonb NOT NULL,
      status text NOT NULL CHECK (status IN ('validated', 'settled')),
      created_at timestamptz NOT NULL DEFAULT now(),
      settled_at timestamptz
    )`,
    `CREATE TABLE IF NOT EXISTS ${s}.invoices (
      batch_id text NOT NULL REFERENCES ${s}.batches (id),
      invoice_number text NOT NULL,
      customer text NOT NULL,
      currency char(3) NOT NULL,
      amount_minor bigint NOT NULL CHECK (amount_minor > 0),
      due_date date NOT NULL,
      csv_line integer NOT NULL,
      status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'paid')),
      charge_id text,
      paid_at timestamptz,
      paid_by_token bigint,
      PRIMARY KEY (batch_id, invoice_number)
    )`,
    `CREATE TABLE IF NOT EXISTS ${s}.ledger_entries (
      id bigserial PRIMARY KEY,
      batch_id text NOT NULL REFERENCES ${s}.batches (id),
      invoice_number text NOT NULL,
      charge_id text NOT NULL,
      currency char(3) NOT NULL,
      amount_minor bigint NOT NULL,
      fencing_token bigint NOT NULL,
      attempt integer NOT NULL,
      worker_id text NOT NULL,
      written_at timestamptz NOT NULL DEFAULT now(),
      FOREIGN KEY (batch_id, invoice_number) REFERENCES ${s}.invoices (batch_id, invoice_number)
    )`,
    `CREATE INDEX IF NOT EXISTS ledger_entries_invoice ON ${s}.ledger_entries (batch_id, invoice_number)`,
    `CREATE TABLE IF NOT EXISTS ${s}.settlements (
      batch_id text PRIMARY KEY REFERENCES ${s}.batches (id),
      invoice_count integer NOT NULL,
      totals jsonb NOT NULL,
      fencing_token bigint NOT NULL,
      settled_at timestamptz NOT NULL DEFAULT now()
    )`,
  ];
}
