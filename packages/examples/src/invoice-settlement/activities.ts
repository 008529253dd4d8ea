import { and, count, eq, sql, sum } from 'drizzle-orm';
import { z } from 'zod';
import { ApplicationFailure, defineActivity, type ActivityContext } from '@palisade/sdk';
import { CURRENCY_CODES } from './currencies.js';
import { createCharge } from './payment-provider.js';
import { InvalidBatchFileError, parseInvoiceCsv } from './parse-invoices.js';
import type { InvoiceTables, SettlementTotal } from './tables.js';

/** Who is doing something: the attempt as the activity sees it in `ctx.info`. */
export interface AttemptStamp {
  readonly workerId: string;
  readonly runId: string;
  readonly stepId: string;
  readonly attempt: number;
  readonly epoch: number;
  readonly token: bigint;
}

/** What the activities report as they go (for the demo's timeline and checks). */
export type InvoiceActivityEvent =
  | { readonly type: 'charge:started'; readonly by: AttemptStamp; readonly invoiceNumber: string }
  | {
      readonly type: 'charge:answered';
      readonly by: AttemptStamp;
      readonly invoiceNumber: string;
      readonly chargeId: string;
      readonly replayed: boolean;
    }
  | {
      readonly type: 'ledger:written';
      readonly by: AttemptStamp;
      readonly invoiceNumber: string;
      readonly ledgerEntryId: number;
      readonly alreadyRecorded: boolean;
    }
  | {
      readonly type: 'ledger:refused';
      readonly by: AttemptStamp;
      readonly invoiceNumber: string;
      readonly error: unknown;
    };

/** What the activities need from their host. */
export interface InvoiceActivityDependencies {
  /** The billing tables (their schema must exist: see `invoiceTablesDdl`). */
  readonly tables: InvoiceTables;
  /** Base URL of the payment provider. */
  readonly providerUrl: string;
  /** Called for every {@link InvoiceActivityEvent}; must not throw. */
  readonly onEvent?: (event: InvoiceActivityEvent) => void;
}

/** Timing of the example's activities. */
export interface InvoiceActivityTimings {
  /** Lease of every attempt; the worker renews it every third. @defaultValue 3_000 (ms) */
  readonly leaseMs?: number;
}

const malformedRow = z.object({
  line: z.number().int(),
  invoiceNumber: z.string().nullable(),
  reason: z.string(),
});

export const batchInvoice = z.object({
  invoiceNumber: z.string(),
  customer: z.string(),
  currency: z.enum(CURRENCY_CODES),
  amountMinor: z.number().int().positive(),
});
export type BatchInvoice = z.infer<typeof batchInvoice>;

export const validatedBatch = z.object({
  rowsRead: z.number().int(),
  invoices: z.array(batchInvoice),
  malformed: z.array(malformedRow),
});

export const chargeOutcome = z.object({
  invoiceNumber: z.string(),
  chargeId: z.string(),
  ledgerEntryId: z.number().int(),
  /** The provider answered with a charge an earlier request (same idempotency key) had created. */
  providerReplayed: z.boolean(),
  /** An earlier attempt of this step had already committed the ledger entry. */
  alreadyRecorded: z.boolean(),
  /** Fencing token of the attempt that recorded the outcome (decimal string). */
  token: z.string(),
});

export const settlement = z.object({
  invoiceCount: z.number().int(),
  totals: z.array(
    z.object({ currency: z.string(), invoices: z.number().int(), amountMinor: z.number().int() }),
  ),
  settledAt: z.string(),
});

/** The idempotency key of an invoice's charge: the same for every attempt, so a retry can never charge twice. */
export function chargeKey(batchId: string, invoiceNumber: string): string {
  return `invoice-settlement/${batchId}/${invoiceNumber}`;
}

/** Who is running: the attempt's worker, run, step, attempt, epoch and fencing token, from `ctx.info`. */
export function attemptStamp(ctx: ActivityContext): AttemptStamp {
  const i = ctx.info;
  return {
    workerId: i.workerId,
    runId: i.runId,
    stepId: i.stepId,
    attempt: i.attempt,
    epoch: i.epoch,
    token: i.fencing.token,
  };
}

/**
 * The example's three activities, bound to their dependencies. Every database write goes through
 * `ctx.fencedTransaction`, so it commits only while the attempt still owns its step; each is also idempotent
 * across attempts (a retry finds what an earlier attempt committed and returns it).
 */
export function createInvoiceActivities(
  deps: InvoiceActivityDependencies,
  timings: InvoiceActivityTimings = {},
) {
  const t = deps.tables;
  const leaseMs = timings.leaseMs ?? 3_000;
  const emit = (event: InvoiceActivityEvent): void => deps.onEvent?.(event);

  /** Parse and validate the CSV, store the batch and its valid invoices, report the malformed rows. */
  const validateBatch = defineActivity({
    name: 'invoice-settlement.validate-batch',
    input: z.object({ batchId: z.string().min(1), sourceName: z.string(), csv: z.string() }),
    output: validatedBatch,
    leaseMs,
    retry: { maximumAttempts: 3, initialIntervalMs: 250 },
    async run(input, ctx) {
      let parsed;
      try {
        parsed = parseInvoiceCsv(input.csv);
      } catch (error) {
        if (error instanceof InvalidBatchFileError) {
          throw ApplicationFailure.nonRetryable(`${input.sourceName}: ${error.message}`, 'InvalidBatchFile');
        }
        throw error;
      }
      const { rowsRead, invoices, malformed } = parsed;
      await ctx.fencedTransaction(async (tx) => {
        await tx
          .insert(t.batches)
          .values({
            id: input.batchId,
            sourceName: input.sourceName,
            rowsRead,
            validCount: invoices.length,
            malformed: [...malformed],
            status: 'validated',
          })
          .onConflictDoNothing();
        if (invoices.length > 0) {
          await tx
            .insert(t.invoices)
            .values(
              invoices.map((i) => ({
                batchId: input.batchId,
                invoiceNumber: i.invoiceNumber,
                customer: i.customer,
                currency: i.currency,
                amountMinor: i.amountMinor,
                dueDate: i.dueDate,
                csvLine: i.line,
              })),
            )
            .onConflictDoNothing();
        }
      });
      return {
        rowsRead,
        invoices: invoices.map(({ invoiceNumber, customer, currency, amountMinor }) => ({
          invoiceNumber,
          customer,
          currency,
          amountMinor,
        })),
        malformed: [...malformed],
      };
    },
  });

  /** Charge one invoice at the provider, then write its ledger entry and mark it paid, fenced. */
  const chargeInvoice = defineActivity({
    name: 'invoice-settlement.charge-invoice',
    input: batchInvoice.extend({ batchId: z.string().min(1) }),
    output: chargeOutcome,
    leaseMs,
    startToCloseTimeoutMs: 60_000,
    retry: { maximumAttempts: 6, initialIntervalMs: 250, backoffCoefficient: 2, jitter: 0 },
    async run(input, ctx) {
      const by = attemptStamp(ctx);
      const invoiceNumber = input.invoiceNumber;
      emit({ type: 'charge:started', by, invoiceNumber });
      // ctx.signal is deliberately not passed: a charge request is never abandoned half-way, its answer is what
      // tells us whether money moved. The idempotency key makes every later attempt safe; the fence below makes
      // sure only the attempt that still owns the step records the result.
      const charge = await createCharge(deps.providerUrl, {
        idempotencyKey: chargeKey(input.batchId, invoiceNumber),
        amountMinor: input.amountMinor,
        currency: input.currency,
        customer: input.customer,
        description: `${invoiceNumber} (${input.batchId})`,
      });
      emit({
        type: 'charge:answered',
        by,
        invoiceNumber,
        chargeId: charge.id,
        replayed: charge.idempotentReplayed,
      });
      let written: { ledgerEntryId: number; alreadyRecorded: boolean };
      try {
        written = await ctx.fencedTransaction(async (tx) => {
          const where = and(
            eq(t.invoices.batchId, input.batchId),
            eq(t.invoices.invoiceNumber, invoiceNumber),
          );
          // The invoice's row lock orders the attempts of this invoice; the fence (the transaction's last
          // statement, added by the engine) decides whether this one may commit at all.
          const [invoice] = await tx
            .select({ status: t.invoices.status, chargeId: t.invoices.chargeId })
            .from(t.invoices)
            .where(where)
            .for('update');
          if (!invoice) {
            throw ApplicationFailure.nonRetryable(
              `invoice ${invoiceNumber} is not in batch ${input.batchId}`,
              'UnknownInvoice',
            );
          }
          if (invoice.status === 'paid') {
            // An earlier attempt committed the entry, then lost its lease before its completion was recorded.
            if (invoice.chargeId !== charge.id) {
              throw ApplicationFailure.nonRetryable(
                `invoice ${invoiceNumber} is already paid by charge ${invoice.chargeId}, not ${charge.id}`,
                'PaidByAnotherCharge',
              );
            }
            const [entry] = await tx
              .select({ id: t.ledgerEntries.id })
              .from(t.ledgerEntries)
              .where(
                and(
                  eq(t.ledgerEntries.batchId, input.batchId),
                  eq(t.ledgerEntries.invoiceNumber, invoiceNumber),
                ),
              );
            return { ledgerEntryId: entry?.id ?? -1, alreadyRecorded: true };
          }
          const [entry] = await tx
            .insert(t.ledgerEntries)
            .values({
              batchId: input.batchId,
              invoiceNumber,
              chargeId: charge.id,
              currency: input.currency,
              amountMinor: input.amountMinor,
              fencingToken: by.token,
              attempt: by.attempt,
              workerId: by.workerId,
            })
            .returning({ id: t.ledgerEntries.id });
          await tx
            .update(t.invoices)
            .set({ status: 'paid', chargeId: charge.id, paidAt: sql`now()`, paidByToken: by.token })
            .where(where);
          return { ledgerEntryId: entry?.id ?? -1, alreadyRecorded: false };
        });
      } catch (error) {
        emit({ type: 'ledger:refused', by, invoiceNumber, error });
        throw error;
      }
      emit({ type: 'ledger:written', by, invoiceNumber, ...written });
      return {
        invoiceNumber,
        chargeId: charge.id,
        ledgerEntryId: written.ledgerEntryId,
        providerReplayed: charge.idempotentReplayed,
        alreadyRecorded: written.alreadyRecorded,
        token: by.token.toString(),
      };
    },
  });

  /** Close the batch: total the ledger per currency and record the settlement, once. */
  const settleBatch = defineActivity({
    name: 'invoice-settlement.settle-batch',
    input: z.object({ batchId: z.string().min(1) }),
    output: settlement,
    leaseMs,
    retry: { maximumAttempts: 3, initialIntervalMs: 250 },
    async run(input, ctx) {
      return ctx.fencedTransaction(async (tx) => {
        const [batch] = await tx
          .select({ status: t.batches.status })
          .from(t.batches)
          .where(eq(t.batches.id, input.batchId))
          .for('update');
        if (!batch) throw ApplicationFailure.nonRetryable(`no batch ${input.batchId}`, 'UnknownBatch');
        const [existing] = await tx
          .select()
          .from(t.settlements)
          .where(eq(t.settlements.batchId, input.batchId));
        if (existing) {
          return {
            invoiceCount: existing.invoiceCount,
            totals: existing.totals,
            settledAt: existing.settledAt.toISOString(),
          };
        }
        const [open] = await tx
          .select({ n: count() })
          .from(t.invoices)
          .where(and(eq(t.invoices.batchId, input.batchId), eq(t.invoices.status, 'open')));
        if ((open?.n ?? 0) > 0) {
          throw ApplicationFailure.nonRetryable(
            `batch ${input.batchId} still has ${open?.n} unpaid invoices`,
            'BatchNotPaid',
          );
        }
        const rows = await tx
          .select({
            currency: t.ledgerEntries.currency,
            invoices: count(),
            amountMinor: sum(t.ledgerEntries.amountMinor),
          })
          .from(t.ledgerEntries)
          .where(eq(t.ledgerEntries.batchId, input.batchId))
          .groupBy(t.ledgerEntries.currency)
          .orderBy(t.ledgerEntries.currency);
        const totals: SettlementTotal[] = rows.map((r) => ({
          currency: r.currency.trim(),
          invoices: r.invoices,
          amountMinor: Number(r.amountMinor ?? 0),
        }));
        const invoiceCount = totals.reduce((n, r) => n + r.invoices, 0);
        const [row] = await tx
          .insert(t.settlements)
          .values({ batchId: input.batchId, invoiceCount, totals, fencingToken: ctx.info.fencing.token })
          .returning({ settledAt: t.settlements.settledAt });
        await tx
          .update(t.batches)
          .set({ status: 'settled', settledAt: sql`now()` })
          .where(eq(t.batches.id, input.batchId));
        return { invoiceCount, totals, settledAt: (row?.settledAt ?? new Date()).toISOString() };
      });
    },
  });

  return { validateBatch, chargeInvoice, settleBatch };
}

export type InvoiceActivities = ReturnType<typeof createInvoiceActivities>;
