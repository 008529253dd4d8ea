import { and, eq, sql } from 'drizzle-orm';
import { z } from 'zod';
import { ApplicationFailure, defineActivity, type ActivityContext } from '@palisade/sdk';
import type { AnyPgDatabase } from '@palisade/engine';
import { attemptStamp, type AttemptStamp } from '../invoice-settlement/activities.js';
import { createRefund } from '../invoice-settlement/payment-provider.js';
import { chatMessageSchema, modelDecisionSchema, type AgentModel } from './agent-model.js';
import {
  TOOL_SPECS,
  cancelResult,
  escalationResult,
  lookupResult,
  policyResult,
  refundToolResult,
  type OrderView,
} from './agent-tools.js';
import { decideRefund } from './refund-policy.js';
import type { SupportTables } from './tables.js';

/** What the activities report as they go (for the demo's timeline and its faults). */
export type SupportAgentEvent =
  | {
      readonly type: 'step:started';
      readonly by: AttemptStamp;
      readonly emailId: string;
      readonly tool: string;
    }
  | {
      readonly type: 'refund:started';
      readonly by: AttemptStamp;
      readonly emailId: string;
      readonly idempotencyKey: string;
    }
  | {
      readonly type: 'refund:answered';
      readonly by: AttemptStamp;
      readonly emailId: string;
      readonly refundId: string;
      readonly replayed: boolean;
    }
  | {
      readonly type: 'refund:recorded';
      readonly by: AttemptStamp;
      readonly emailId: string;
      readonly ledgerEntryId: number;
      readonly alreadyRecorded: boolean;
    }
  | {
      readonly type: 'refund:refused';
      readonly by: AttemptStamp;
      readonly emailId: string;
      readonly error: unknown;
    };

/** What the activities need from their host. */
export interface SupportAgentDependencies {
  /** The shop's tables (their schema must exist: see `supportTablesDdl`). */
  readonly tables: SupportTables;
  /** Base URL of the payment provider (the invoice example's). */
  readonly providerUrl: string;
  /** The model that decides the agent's next step. */
  readonly model: AgentModel;
  /** Refunds above this many cents need a person's approval. */
  readonly approvalThresholdCents: number;
  /** Called for every {@link SupportAgentEvent}; must not throw. */
  readonly onEvent?: (event: SupportAgentEvent) => void;
  /**
   * Awaited as each step of an agent's loop (a model call or a tool) starts, before it does anything: for fault
   * injection (the demo kills a worker there). Must settle once `signal` fires.
   */
  readonly beforeStep?: (step: {
    readonly by: AttemptStamp;
    readonly emailId: string;
    readonly tool: string;
    readonly signal: AbortSignal;
  }) => Promise<void>;
}

/** Timing of the example's activities. */
export interface SupportAgentTimings {
  /** Lease of every attempt; the worker renews it every third. @defaultValue 6_000 (ms) */
  readonly leaseMs?: number;
}

/** Which email a step works for, and on whose behalf: every tool acts for the sender only. */
const emailContext = z.object({
  emailId: z.string().min(1),
  /** The sender: orders are shown and changed only for their owner. */
  customerEmail: z.string().min(1),
  /** When the customer wrote: the refund policy's window is counted to it. */
  receivedAt: z.string().min(1),
});
export type EmailContext = z.infer<typeof emailContext>;

const approvalDecision = z.enum(['approved', 'rejected', 'timed-out']);

/** The payment provider's idempotency key of a refund: one per tool call of one run, whatever attempt sends it. */
export function refundKey(runId: string, toolCallId: string): string {
  return `support-agent/${runId}/${toolCallId}`;
}

/**
 * The retry policy of every step: a few quick retries (a lease lost to a stalled or killed worker counts as one),
 * then the run sees the failure — as the tool's result, or, for the model, by escalating the email.
 */
const retry = { maximumAttempts: 6, initialIntervalMs: 250, backoffCoefficient: 2, jitter: 0 } as const;

/**
 * The agent's activities, bound to their dependencies: the model call, the tools, the approval bookkeeping and the
 * reply. Each logs itself in `agent_steps` in the same `ctx.fencedTransaction` as its own writes (reads included,
 * so that every step, even a read-only one, leaves one fenced record), and each is idempotent across attempts.
 */
export function createSupportAgentActivities(
  deps: SupportAgentDependencies,
  timings: SupportAgentTimings = {},
) {
  const t = deps.tables;
  const leaseMs = timings.leaseMs ?? 6_000;
  const emit = (event: SupportAgentEvent): void => deps.onEvent?.(event);

  /** Report the step and let the host's fault hook run, before the step does anything. */
  async function begin(ctx: ActivityContext, emailId: string, tool: string): Promise<AttemptStamp> {
    const by = attemptStamp(ctx);
    emit({ type: 'step:started', by, emailId, tool });
    await deps.beforeStep?.({ by, emailId, tool, signal: ctx.signal });
    return by;
  }

  /**
   * Record the step in `agent_steps` (in the caller's fenced transaction): once per fencing scope — the step's run
   * and position, the same for all its attempts — counting the attempts that committed it.
   */
  async function logStep(
    tx: AnyPgDatabase,
    ctx: ActivityContext,
    emailId: string,
    tool: string,
    detail: unknown,
  ): Promise<void> {
    const { info } = ctx;
    await tx
      .insert(t.agentSteps)
      .values({
        scope: info.fencing.scope,
        runId: info.runId,
        emailId,
        tool,
        detail,
        fencingToken: info.fencing.token,
        workerId: info.workerId,
      })
      .onConflictDoUpdate({
        target: t.agentSteps.scope,
        set: {
          executions: sql`${t.agentSteps.executions} + 1`,
          fencingToken: info.fencing.token,
          workerId: info.workerId,
        },
      });
  }

  /** The order as the tools show it, when it exists. */
  async function readOrder(tx: AnyPgDatabase, orderId: string, lock = false) {
    const query = tx.select().from(t.orders).where(eq(t.orders.orderId, orderId));
    const [row] = lock ? await query.for('update') : await query;
    return row;
  }

  const toView = (o: NonNullable<Awaited<ReturnType<typeof readOrder>>>): OrderView => ({
    orderId: o.orderId,
    item: o.item,
    quantity: o.quantity,
    totalCents: o.totalCents,
    status: o.status,
    finalSale: o.finalSale,
    orderedAt: new Date(o.orderedAt).toISOString(),
    shippedAt: o.shippedAt && new Date(o.shippedAt).toISOString(),
    deliveredAt: o.deliveredAt && new Date(o.deliveredAt).toISOString(),
    carrier: o.carrier,
    trackingNumber: o.trackingNumber,
    estimatedDeliveryAt: o.estimatedDeliveryAt && new Date(o.estimatedDeliveryAt).toISOString(),
    refundedCents: o.refundedCents,
  });

  /** Ask the model for the next step: tool calls, or the reply. */
  const decideNext = defineActivity({
    name: 'support-agent.decide-next',
    input: z.object({ emailId: z.string(), messages: z.array(chatMessageSchema).min(1) }),
    output: modelDecisionSchema,
    leaseMs,
    startToCloseTimeoutMs: 120_000,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'model');
      const decision = await deps.model.next({
        messages: input.messages,
        tools: TOOL_SPECS,
        signal: ctx.signal,
      });
      await ctx.fencedTransaction((tx) =>
        logStep(tx, ctx, input.emailId, 'model', {
          decision: decision.type === 'answer' ? 'answer' : decision.calls.map((c) => c.function.name),
        }),
      );
      return decision;
    },
  });

  /** `lookup_order`: the order, if it exists and is the sender's. */
  const lookupOrder = defineActivity({
    name: 'support-agent.lookup-order',
    input: emailContext.extend({ orderId: z.string() }),
    output: lookupResult,
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'lookup_order');
      return ctx.fencedTransaction(async (tx) => {
        const order = await readOrder(tx, input.orderId);
        await logStep(tx, ctx, input.emailId, 'lookup_order', { orderId: input.orderId, found: !!order });
        if (!order) return { found: false as const, orderId: input.orderId };
        const mine = order.customerEmail === input.customerEmail;
        return {
          found: true as const,
          orderId: input.orderId,
          belongsToSender: mine,
          order: mine ? toView(order) : null,
        };
      });
    },
  });

  /** `check_refund_policy`: what the policy allows for the sender's order. */
  const checkRefundPolicy = defineActivity({
    name: 'support-agent.check-refund-policy',
    input: emailContext.extend({ orderId: z.string(), amountCents: z.number().int().positive().optional() }),
    output: policyResult,
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'check_refund_policy');
      return ctx.fencedTransaction(async (tx) => {
        const order = await readOrder(tx, input.orderId);
        const base = { orderId: input.orderId, approvalThresholdCents: deps.approvalThresholdCents };
        let result: z.infer<typeof policyResult>;
        if (!order || order.customerEmail !== input.customerEmail) {
          result = {
            ...base,
            found: false,
            eligible: false,
            reason: 'no such order for this customer',
            maxRefundableCents: 0,
            refundCents: 0,
            approvalRequired: false,
          };
        } else {
          const verdict = decideRefund(
            order,
            new Date(input.receivedAt),
            input.amountCents,
            deps.approvalThresholdCents,
          );
          result = { ...base, found: true, ...verdict };
        }
        await logStep(tx, ctx, input.emailId, 'check_refund_policy', {
          orderId: input.orderId,
          eligible: result.eligible,
        });
        return result;
      });
    },
  });

  /** `cancel_order`: cancel the sender's order if it has not shipped. */
  const cancelOrder = defineActivity({
    name: 'support-agent.cancel-order',
    input: emailContext.extend({ orderId: z.string() }),
    output: cancelResult,
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'cancel_order');
      return ctx.fencedTransaction(async (tx) => {
        const order = await readOrder(tx, input.orderId, true);
        let result: z.infer<typeof cancelResult>;
        if (!order || order.customerEmail !== input.customerEmail) {
          result = {
            orderId: input.orderId,
            cancelled: false,
            status: 'unknown',
            reason: 'no such order for this customer',
          };
        } else if (order.status === 'cancelled') {
          // An earlier attempt of this step (or an earlier email) cancelled it already.
          result = {
            orderId: input.orderId,
            cancelled: true,
            status: 'cancelled',
            reason: 'the order is cancelled',
          };
        } else if (order.status !== 'processing') {
          result = {
            orderId: input.orderId,
            cancelled: false,
            status: order.status,
            reason: `the order has already ${order.status === 'shipped' ? 'shipped' : 'been delivered'}`,
          };
        } else {
          await tx
            .update(t.orders)
            .set({ status: 'cancelled', cancelledAt: sql`now()` })
            .where(eq(t.orders.orderId, input.orderId));
          result = {
            orderId: input.orderId,
            cancelled: true,
            status: 'cancelled',
            reason: 'the order is cancelled',
          };
        }
        await logStep(tx, ctx, input.emailId, 'cancel_order', result);
        return result;
      });
    },
  });

  /** Put a refund above the threshold in the approval queue (a row people see), once. */
  const requestApproval = defineActivity({
    name: 'support-agent.request-approval',
    input: emailContext.extend({
      orderId: z.string(),
      amountCents: z.number().int().positive(),
      reason: z.string(),
    }),
    output: z.object({ status: z.string() }),
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'request_approval');
      return ctx.fencedTransaction(async (tx) => {
        await tx
          .insert(t.approvals)
          .values({
            emailId: input.emailId,
            runId: ctx.info.runId,
            orderId: input.orderId,
            amountCents: input.amountCents,
            reason: input.reason,
            status: 'pending',
          })
          .onConflictDoNothing();
        await logStep(tx, ctx, input.emailId, 'request_approval', { amountCents: input.amountCents });
        return { status: 'pending' };
      });
    },
  });

  /** Record a person's decision on a refund (or that none came in time). */
  const recordApproval = defineActivity({
    name: 'support-agent.record-approval',
    input: emailContext.extend({
      decision: approvalDecision,
      decidedBy: z.string().nullable(),
      note: z.string().nullable(),
    }),
    output: z.object({ status: approvalDecision }),
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'record_approval');
      return ctx.fencedTransaction(async (tx) => {
        await tx
          .update(t.approvals)
          .set({
            status: input.decision,
            decidedBy: input.decidedBy,
            note: input.note,
            decidedAt: sql`now()`,
          })
          .where(and(eq(t.approvals.emailId, input.emailId), eq(t.approvals.status, 'pending')));
        await logStep(tx, ctx, input.emailId, 'record_approval', { decision: input.decision });
        return { status: input.decision };
      });
    },
  });

  /**
   * `issue_refund`: refund at the payment provider (idempotency key per tool call), then write the ledger row and the
   * order's refunded amount in one fenced transaction. Checks the policy first and, above the threshold, that the
   * approval queue holds this email's approval for this amount.
   */
  const issueRefund = defineActivity({
    name: 'support-agent.issue-refund',
    queue: 'payments',
    input: emailContext.extend({
      orderId: z.string(),
      amountCents: z.number().int().positive(),
      reason: z.string(),
      toolCallId: z.string().min(1),
      approvedBy: z.string().nullable(),
    }),
    output: refundToolResult,
    leaseMs,
    startToCloseTimeoutMs: 60_000,
    retry: { ...retry, maximumAttempts: 8 },
    async run(input, ctx) {
      const by = await begin(ctx, input.emailId, 'issue_refund');
      const { runId } = ctx.info;
      const recorded = and(eq(t.refundLedger.runId, runId), eq(t.refundLedger.toolCallId, input.toolCallId));
      // First, in a fenced transaction of its own: is it already done, is it allowed, is it approved?
      const check = await ctx.fencedTransaction(async (tx) => {
        const [done] = await tx.select().from(t.refundLedger).where(recorded);
        const order = await readOrder(tx, input.orderId);
        const [approval] = await tx.select().from(t.approvals).where(eq(t.approvals.emailId, input.emailId));
        await logStep(tx, ctx, input.emailId, 'issue_refund', { amountCents: input.amountCents });
        return { done, order, approval };
      });
      if (check.done) {
        return {
          status: 'refunded' as const,
          orderId: input.orderId,
          refundId: check.done.refundId,
          amountCents: check.done.amountCents,
          approvedBy: check.done.approvedBy,
        };
      }
      const order = check.order;
      if (!order || order.customerEmail !== input.customerEmail) {
        return {
          status: 'declined' as const,
          orderId: input.orderId,
          reason: 'no such order for this customer',
        };
      }
      const verdict = decideRefund(
        order,
        new Date(input.receivedAt),
        input.amountCents,
        deps.approvalThresholdCents,
      );
      if (!verdict.eligible || verdict.refundCents !== input.amountCents) {
        return {
          status: 'declined' as const,
          orderId: input.orderId,
          reason: verdict.eligible
            ? `at most ${verdict.maxRefundableCents} cents can be refunded`
            : verdict.reason,
        };
      }
      if (verdict.approvalRequired) {
        const a = check.approval;
        if (
          !a ||
          a.status !== 'approved' ||
          a.amountCents !== input.amountCents ||
          a.decidedBy !== input.approvedBy
        ) {
          throw ApplicationFailure.nonRetryable(
            `refund of ${input.amountCents} cents for ${input.emailId} is above the approval threshold and has no approval`,
            'ApprovalRequired',
          );
        }
      }
      const idempotencyKey = refundKey(runId, input.toolCallId);
      emit({ type: 'refund:started', by, emailId: input.emailId, idempotencyKey });
      // As in the invoice example, ctx.signal is not passed: an answer tells whether money moved; the key makes every
      // later attempt safe, and the fence below makes sure only the attempt that owns the step records it.
      const refund = await createRefund(deps.providerUrl, {
        idempotencyKey,
        chargeId: order.chargeId,
        amountMinor: input.amountCents,
        reason: input.reason,
      });
      emit({
        type: 'refund:answered',
        by,
        emailId: input.emailId,
        refundId: refund.id,
        replayed: refund.idempotentReplayed,
      });
      let written: { ledgerEntryId: number; alreadyRecorded: boolean };
      try {
        written = await ctx.fencedTransaction(async (tx) => {
          // The order's row lock orders the refunds of one order; the fence, the transaction's last statement, decides
          // whether this attempt may commit at all.
          await readOrder(tx, input.orderId, true);
          const [done] = await tx.select({ id: t.refundLedger.id }).from(t.refundLedger).where(recorded);
          if (done) return { ledgerEntryId: done.id, alreadyRecorded: true };
          const [entry] = await tx
            .insert(t.refundLedger)
            .values({
              emailId: input.emailId,
              runId,
              toolCallId: input.toolCallId,
              orderId: input.orderId,
              refundId: refund.id,
              amountCents: input.amountCents,
              approvedBy: verdict.approvalRequired ? input.approvedBy : null,
              fencingToken: by.token,
              attempt: by.attempt,
              workerId: by.workerId,
            })
            .returning({ id: t.refundLedger.id });
          await tx
            .update(t.orders)
            .set({ refundedCents: sql`${t.orders.refundedCents} + ${input.amountCents}` })
            .where(eq(t.orders.orderId, input.orderId));
          return { ledgerEntryId: entry?.id ?? -1, alreadyRecorded: false };
        });
      } catch (error) {
        emit({ type: 'refund:refused', by, emailId: input.emailId, error });
        throw error;
      }
      emit({ type: 'refund:recorded', by, emailId: input.emailId, ...written });
      return {
        status: 'refunded' as const,
        orderId: input.orderId,
        refundId: refund.id,
        amountCents: input.amountCents,
        approvedBy: verdict.approvalRequired ? input.approvedBy : null,
      };
    },
  });

  /** `escalate_to_human`: open a ticket for a person, once per run (a second call gets the same ticket). */
  const escalate = defineActivity({
    name: 'support-agent.escalate',
    input: emailContext.extend({ reason: z.string().min(1) }),
    output: escalationResult,
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'escalate_to_human');
      return ctx.fencedTransaction(async (tx) => {
        const [open] = await tx
          .select({ id: t.escalations.id })
          .from(t.escalations)
          .where(and(eq(t.escalations.emailId, input.emailId), eq(t.escalations.runId, ctx.info.runId)));
        const [row] = open
          ? [open]
          : await tx
              .insert(t.escalations)
              .values({
                emailId: input.emailId,
                runId: ctx.info.runId,
                reason: input.reason,
                fencingToken: ctx.info.fencing.token,
              })
              .returning({ id: t.escalations.id });
        await logStep(tx, ctx, input.emailId, 'escalate_to_human', { reason: input.reason });
        return { escalated: true as const, ticket: `ESC-${String(row?.id ?? 0).padStart(5, '0')}` };
      });
    },
  });

  /** Write the model's reply to the outbox, once per email and run. */
  const sendReply = defineActivity({
    name: 'support-agent.send-reply',
    input: emailContext.extend({ subject: z.string(), body: z.string().min(1) }),
    output: z.object({ outboxId: z.number().int() }),
    leaseMs,
    retry,
    async run(input, ctx) {
      await begin(ctx, input.emailId, 'send_reply');
      return ctx.fencedTransaction(async (tx) => {
        const mine = and(eq(t.outbox.emailId, input.emailId), eq(t.outbox.runId, ctx.info.runId));
        const [sent] = await tx.select({ id: t.outbox.id }).from(t.outbox).where(mine);
        const [row] = sent
          ? [sent]
          : await tx
              .insert(t.outbox)
              .values({
                emailId: input.emailId,
                runId: ctx.info.runId,
                toAddress: input.customerEmail,
                subject: input.subject,
                body: input.body,
                fencingToken: ctx.info.fencing.token,
              })
              .returning({ id: t.outbox.id });
        await logStep(tx, ctx, input.emailId, 'send_reply', { outboxId: row?.id });
        return { outboxId: row?.id ?? -1 };
      });
    },
  });

  return {
    decideNext,
    lookupOrder,
    checkRefundPolicy,
    cancelOrder,
    requestApproval,
    recordApproval,
    issueRefund,
    escalate,
    sendReply,
  };
}

export type SupportAgentActivities = ReturnType<typeof createSupportAgentActivities>;
