/**
 * Example: invoice settlement. A CSV batch of invoices is validated, charged at a payment provider (idempotency
 * keys), written to a ledger through fenced transactions and settled — while one worker stalls mid-charge and its
 * late write is refused. See `runInvoiceSettlementDemo`.
 * @module
 */
export {
  createInvoiceActivities,
  chargeKey,
  type InvoiceActivities,
  type InvoiceActivityEvent,
} from './activities.js';
export type { CurrencyTotal, DemoCheck, StaleWriteRejection } from './checks.js';
export { CURRENCIES, formatMoney, type CurrencyCode } from './currencies.js';
export {
  parseInvoiceCsv,
  type MalformedRow,
  type ParsedBatch,
  type ParsedInvoice,
} from './parse-invoices.js';
export { PaymentProvider, createCharge, type Charge, type ChargeResponse } from './payment-provider.js';
export {
  INVOICE_SETTLEMENT_DEMO,
  runInvoiceSettlementDemo,
  type InvoiceSettlementDemoOptions,
  type InvoiceSettlementDemoResult,
} from './run-demo.js';
export { invoiceTables, invoiceTablesDdl, type InvoiceTables } from './tables.js';
export { createInvoiceSettlementWorkflow, type SettlementReport } from './workflow.js';
