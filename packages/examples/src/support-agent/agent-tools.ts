/**
 * The agent's tools as the model sees them (names, descriptions, JSON Schemas of the arguments), the schemas the
 * workflow checks a call's arguments with, and the shapes of their results. Each tool runs as an activity
 * (activities.ts); the workflow (workflow.ts) dispatches the model's calls to them.
 * @module
 */
import { z } from 'zod';
import type { ToolSpec } from './agent-model.js';
import { ORDER_ID } from './inbox.js';

const orderIdArg = z.string().regex(ORDER_ID, 'must be an order number like ORD-12345');

/** The arguments of each tool, checked before the tool runs (a model can send anything). */
export const TOOL_ARGUMENTS = {
  lookup_order: z.object({ order_id: orderIdArg }).strict(),
  check_refund_policy: z
    .object({ order_id: orderIdArg, amount_cents: z.number().int().positive().optional() })
    .strict(),
  cancel_order: z.object({ order_id: orderIdArg }).strict(),
  issue_refund: z
    .object({
      order_id: orderIdArg,
      amount_cents: z.number().int().positive(),
      reason: z.string().min(1).max(500),
    })
    .strict(),
  escalate_to_human: z.object({ reason: z.string().min(1).max(1_000) }).strict(),
} as const;

/** A tool's name. */
export type ToolName = keyof typeof TOOL_ARGUMENTS;

/** Whether `name` is one of the agent's tools. */
export function isToolName(name: string): name is ToolName {
  return Object.hasOwn(TOOL_ARGUMENTS, name);
}

/** The tools, as the chat-completions `tools` parameter lists them. */
export const TOOL_SPECS: readonly ToolSpec[] = Object.freeze([
  {
    type: 'function',
    function: {
      name: 'lookup_order',
      description:
        "Look an order up by its number. Returns its item, total, status, shipping and refunds, or that it does not exist or is not the sender's.",
      parameters: {
        type: 'object',
        properties: { order_id: { type: 'string', description: 'The order number, e.g. ORD-12345' } },
        required: ['order_id'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'check_refund_policy',
      description:
        'Check whether the refund policy allows refunding an order, how much at most, and whether a person must approve it.',
      parameters: {
        type: 'object',
        properties: {
          order_id: { type: 'string' },
          amount_cents: {
            type: 'integer',
            description: 'The amount the customer asks for, in cents, if any',
          },
        },
        required: ['order_id'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'cancel_order',
      description:
        'Cancel an order that has not shipped yet. A cancelled order can then be refunded in full.',
      parameters: {
        type: 'object',
        properties: { order_id: { type: 'string' } },
        required: ['order_id'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'issue_refund',
      description:
        'Refund an amount of an order to the card it was paid with. Refunds above the approval threshold wait for a person to approve them (up to two days).',
      parameters: {
        type: 'object',
        properties: {
          order_id: { type: 'string' },
          amount_cents: { type: 'integer' },
          reason: { type: 'string' },
        },
        required: ['order_id', 'amount_cents', 'reason'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'escalate_to_human',
      description:
        'Hand the conversation to a person on the support team (an angry customer, a request outside policy).',
      parameters: {
        type: 'object',
        properties: { reason: { type: 'string' } },
        required: ['reason'],
        additionalProperties: false,
      },
    },
  },
]);

/** The instructions the model works under. */
export function systemPrompt(approvalThresholdCents: number): string {
  return [
    'You are the customer-support agent of an online shop. You answer one customer email at a time.',
    'Use the tools to look orders up, check the refund policy, cancel unshipped orders, refund and escalate; never',
    'promise what a tool did not confirm. Only discuss orders that belong to the sender. Refunds above',
    `$${(approvalThresholdCents / 100).toFixed(2)} wait for a person's approval, which the issue_refund tool asks for.`,
    'Escalate angry complaints to a person. When you are done, answer with the reply to send to the customer,',
    'plain text, signed "Customer Support".',
  ].join(' ');
}

/** An order as `lookup_order` shows it to the model. */
export const orderView = z.object({
  orderId: z.string(),
  item: z.string(),
  quantity: z.number().int(),
  totalCents: z.number().int(),
  status: z.enum(['processing', 'shipped', 'delivered', 'cancelled']),
  finalSale: z.boolean(),
  orderedAt: z.string(),
  shippedAt: z.string().nullable(),
  deliveredAt: z.string().nullable(),
  carrier: z.string().nullable(),
  trackingNumber: z.string().nullable(),
  estimatedDeliveryAt: z.string().nullable(),
  refundedCents: z.number().int(),
});
export type OrderView = z.infer<typeof orderView>;

/** What `lookup_order` returns: not found; found but another customer's (no details); or the order. */
export const lookupResult = z.discriminatedUnion('found', [
  z.object({ found: z.literal(false), orderId: z.string() }),
  z.object({
    found: z.literal(true),
    orderId: z.string(),
    belongsToSender: z.boolean(),
    order: orderView.nullable(),
  }),
]);
export type LookupResult = z.infer<typeof lookupResult>;

/** What `check_refund_policy` returns: the policy's verdict (refund-policy.ts) for the sender's order. */
export const policyResult = z.object({
  orderId: z.string(),
  found: z.boolean(),
  eligible: z.boolean(),
  reason: z.string(),
  maxRefundableCents: z.number().int(),
  refundCents: z.number().int(),
  approvalRequired: z.boolean(),
  approvalThresholdCents: z.number().int(),
});
export type PolicyResult = z.infer<typeof policyResult>;

/** What `cancel_order` returns: whether the order is now cancelled, and why not. */
export const cancelResult = z.object({
  orderId: z.string(),
  cancelled: z.boolean(),
  status: z.string(),
  reason: z.string(),
});
export type CancelResult = z.infer<typeof cancelResult>;

/** What `issue_refund` ended with, as the model is told. */
export const refundToolResult = z.discriminatedUnion('status', [
  z.object({
    status: z.literal('refunded'),
    orderId: z.string(),
    refundId: z.string(),
    amountCents: z.number().int(),
    approvedBy: z.string().nullable(),
  }),
  z.object({ status: z.literal('declined'), orderId: z.string(), reason: z.string() }),
  z.object({
    status: z.literal('rejected'),
    orderId: z.string(),
    approver: z.string(),
    note: z.string().nullable(),
  }),
  z.object({ status: z.literal('escalated'), orderId: z.string(), reason: z.string() }),
]);
export type RefundToolResult = z.infer<typeof refundToolResult>;

/** What `escalate_to_human` returns: the ticket a person follows up. */
export const escalationResult = z.object({ escalated: z.literal(true), ticket: z.string() });
export type EscalationResult = z.infer<typeof escalationResult>;
