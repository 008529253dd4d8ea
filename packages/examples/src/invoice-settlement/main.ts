/**
 * Run the invoice-settlement demo from the command line:
 *
 *   pnpm --filter @palisade/examples demo:invoices                       # embedded database (PGlite, in memory)
 *   DATABASE_URL=postgres://… pnpm --filter @palisade/examples demo:invoices   # a PostgreSQL server
 *
 * Exits 0 when every check passed, 1 otherwise.
 */
import { runInvoiceSettlementDemo } from './run-demo.js';

const databaseUrl = process.env.DATABASE_URL || undefined;
const result = await runInvoiceSettlementDemo(databaseUrl ? { databaseUrl } : {});
process.exitCode = result.ok ? 0 : 1;
