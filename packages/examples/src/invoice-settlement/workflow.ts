import { z } from 'zod';
import { defineWorkflow } from '@palisade/sdk';
import { chargeOutcome, settlement, validatedBatch, type InvoiceActivities } from './activities.js';

export const settlementInput = z.object({
  batchId: z.string().min(1).max(100),
  /** Where the CSV came from (a file name), for messages and the batch record. */
  sourceName: z.string().min(1),
  /** The batch itself: CSV text with the header `invoice_number,customer,currency,amount_minor,due_date`. */
  csv: z.string().min(1),
  /** Charges in flight at once. @defaultValue 8 */
  parallelism: z.number().int().min(1).max(64).default(8),
});

export const settlementReport = z.object({
  batchId: z.string(),
  rowsRead: z.number().int(),
  malformed: validatedBatch.shape.malformed,
  charged: z.array(chargeOutcome),
  settlement,
});
export type SettlementReport = z.infer<typeof settlementReport>;

/**
 * The invoice-settlement workflow: validate the batch, charge every valid invoice (at most `parallelism` at a
 * time, each charge an activity that also writes the ledger entry and marks the invoice paid, fenced), then
 * settle the batch and return a report. Workflow code only orchestrates: every effect is in an activity.
 */
export function createInvoiceSettlementWorkflow(activities: InvoiceActivities) {
  return defineWorkflow({
    name: 'invoice-settlement',
    input: settlementInput,
    output: settlementReport,
    async run(input, ctx) {
      const batch = await ctx.run(activities.validateBatch, {
        batchId: input.batchId,
        sourceName: input.sourceName,
        csv: input.csv,
      });
      // Bounded parallelism: `parallelism` lanes, each taking the next invoice when its charge is done. Replay
      // delivers recorded outcomes in their original order, so the lanes pick the same invoices every time.
      const charged: z.infer<typeof chargeOutcome>[] = [];
      let next = 0;
      const lane = async (): Promise<void> => {
        while (next < batch.invoices.length) {
          const index = next++;
          const invoice = batch.invoices[index];
          if (!invoice) break;
          charged[index] = await ctx.run(activities.chargeInvoice, { batchId: input.batchId, ...invoice });
        }
      };
      const lanes = Math.min(input.parallelism, batch.invoices.length);
      await Promise.all(Array.from({ length: lanes }, () => lane()));
      const settled = await ctx.run(activities.settleBatch, { batchId: input.batchId });
      return {
        batchId: input.batchId,
        rowsRead: batch.rowsRead,
        malformed: batch.malformed,
        charged,
        settlement: settled,
      };
    },
  });
}
