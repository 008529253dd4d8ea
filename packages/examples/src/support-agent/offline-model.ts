/**
 * The offline provider of the agent's model: a decision procedure over what wink-nlp reads in the email (intent,
 * order numbers, amounts, sentiment: email-analysis.ts) and what the tools have answered so far in the
 * conversation. It speaks the same protocol as the chat-completions provider — the conversation in, tool calls or
 * the reply out — so the workflow cannot tell them apart, and the demo runs with no network. Deterministic: the same
 * conversation gives the same decision (tool-call ids included).
 * @module
 */
import type { AgentModel, ChatMessage, ModelDecision, ToolCall } from './agent-model.js';
import type {
  CancelResult,
  EscalationResult,
  LookupResult,
  OrderView,
  PolicyResult,
  RefundToolResult,
  ToolName,
} from './agent-tools.js';
import { analyzeEmail, loadEnglishModel, type EmailAnalysis } from './email-analysis.js';

/** The offline model: {@link decideOffline} behind the {@link AgentModel} interface (loads wink's model at once). */
export function createOfflineModel(): AgentModel {
  loadEnglishModel();
  return {
    description: 'offline: wink-nlp + wink-eng-lite-web-model (intent, entities, sentiment), no network',
    next: (request) => Promise.resolve(decideOffline(request.messages)),
  };
}

/** A tool call of the conversation with what it returned (undefined while unanswered). */
interface ToolExchange {
  readonly name: string;
  readonly result: unknown;
}

/** The tool calls so far, paired with their results by call id. */
function exchanges(messages: readonly ChatMessage[]): ToolExchange[] {
  const results = new Map<string, unknown>();
  for (const m of messages) {
    if (m.role === 'tool') results.set(m.tool_call_id, parseJson(m.content));
  }
  return messages.flatMap((m) =>
    m.role === 'assistant'
      ? (m.tool_calls ?? []).map((c) => ({ name: c.function.name, result: results.get(c.id) }))
      : [],
  );
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The email as the workflow hands it over: a `From:` header line, the subject, then the body. */
function readEmail(messages: readonly ChatMessage[]): { firstName: string; text: string } {
  const user = messages.find((m) => m.role === 'user')?.content ?? '';
  const firstName = /^From: ([^\s<]+)/m.exec(user)?.[1] ?? 'there';
  // What the customer wrote: the subject line and the body, not the headers.
  const text = user
    .split('\n')
    .filter((line) => !/^(From|Received):/.test(line))
    .join('\n')
    .replace(/^Subject: /m, '');
  return { firstName, text };
}

const usd = (cents: number): string => `$${(cents / 100).toFixed(2)}`;
const day = (iso: string | null): string =>
  iso === null
    ? 'an unknown date'
    : new Date(iso).toLocaleDateString('en-US', { month: 'long', day: 'numeric', timeZone: 'UTC' });

/** Where the order is, in a sentence. */
function statusSentence(o: OrderView): string {
  switch (o.status) {
    case 'processing':
      return `Your order ${o.orderId} (${o.item}) is being prepared in our warehouse and has not shipped yet; you will get a tracking number as soon as it leaves.`;
    case 'shipped':
      return `Your order ${o.orderId} (${o.item}) shipped on ${day(o.shippedAt)} with ${o.carrier ?? 'our carrier'}, tracking number ${o.trackingNumber ?? 'to follow'}, and is expected on ${day(o.estimatedDeliveryAt)}.`;
    case 'delivered':
      return `Our records show your order ${o.orderId} (${o.item}) was delivered by ${o.carrier ?? 'our carrier'} on ${day(o.deliveredAt)}. If you cannot find it, please check with neighbours or your building's mailroom, and tell us if it is still missing.`;
    case 'cancelled':
      return `Your order ${o.orderId} (${o.item}) was cancelled.`;
  }
}

/**
 * The next step for the conversation `messages` (system prompt, the customer's email, then tool calls and their
 * results): the first tool the email still needs, in the order a support agent would go — escalate a complaint;
 * without an order number, ask for one; look the order up; then, by intent, report where it is, cancel it, check
 * the refund policy and refund — and once nothing is left to do, the reply.
 */
export function decideOffline(messages: readonly ChatMessage[]): ModelDecision {
  const { firstName, text } = readEmail(messages);
  const analysis = analyzeEmail(text);
  const done = exchanges(messages);
  const last = <T>(name: ToolName): T | undefined =>
    done.filter((e) => e.name === name).at(-1)?.result as T | undefined;
  const call = (name: ToolName, args: Record<string, unknown>): ModelDecision => {
    const toolCall: ToolCall = {
      id: `call_${done.length + 1}`,
      type: 'function',
      function: { name, arguments: JSON.stringify(args) },
    };
    return { type: 'tool_calls', calls: [toolCall] };
  };
  const reply = (...paragraphs: string[]): ModelDecision => ({
    type: 'answer',
    content: [
      `Hi ${firstName},`,
      ...(analysis.sentiment < -0.2 ? ["I'm sorry for the trouble, and thank you for telling us."] : []),
      ...paragraphs,
      'Best regards,\nCustomer Support',
    ].join('\n\n'),
  });

  // A tool that answered with an error (a bad argument, a failure): hand over to a person rather than guess.
  const failed = done.find((e) => (e.result as { error?: unknown } | undefined)?.error !== undefined);
  const escalation = last<EscalationResult>('escalate_to_human');
  if (failed && !escalation) {
    return call('escalate_to_human', { reason: `the ${failed.name} tool failed; a person should take over` });
  }
  if (analysis.intent === 'complaint' || failed) {
    if (!escalation) {
      return call('escalate_to_human', {
        reason: `complaint (${analysis.cues.join(', ')}; sentiment ${analysis.sentiment.toFixed(2)})${analysis.orderIds[0] ? ` about ${analysis.orderIds[0]}` : ''}`,
      });
    }
    return reply(
      `I have passed your message to a senior member of our support team (ticket ${escalation.ticket}), who will contact you personally within one business day.`,
    );
  }

  const orderId = analysis.orderIds[0];
  if (orderId === undefined) return replyWithoutOrder(analysis, reply);
  const lookup = last<LookupResult>('lookup_order');
  if (!lookup) return call('lookup_order', { order_id: orderId });
  if (!lookup.found) {
    return reply(
      `I could not find an order numbered ${orderId}. Could you check the number in your order confirmation email (it looks like ORD-12345) and reply with it?`,
    );
  }
  if (!lookup.belongsToSender || !lookup.order) {
    return reply(
      `Order ${orderId} is not linked to this email address, so I cannot share its details or make changes to it. Please write to us from the address the order was placed with.`,
    );
  }
  const order = lookup.order;
  switch (analysis.intent) {
    case 'where-is-my-order':
    case 'other':
      return reply(statusSentence(order));
    case 'cancel':
      return decideCancel(order, last, call, reply);
    case 'refund':
      if (order.status === 'processing' || last<CancelResult>('cancel_order')) {
        return decideCancel(order, last, call, reply);
      }
      return decideRefund(order, analysis, last, call, reply);
  }
}

type Last = <T>(name: ToolName) => T | undefined;
type Call = (name: ToolName, args: Record<string, unknown>) => ModelDecision;
type Reply = (...paragraphs: string[]) => ModelDecision;

function replyWithoutOrder(analysis: EmailAnalysis, reply: Reply): ModelDecision {
  const ask =
    'Could you reply with your order number? You will find it in your order confirmation email; it looks like ORD-12345.';
  switch (analysis.intent) {
    case 'refund':
      return reply("I'd be glad to look into a refund for you.", ask);
    case 'cancel':
      return reply('I can cancel an order as long as it has not shipped yet.', ask);
    case 'where-is-my-order':
      return reply('Let me find out where your order is.', ask);
    default:
      return reply(
        'Thank you for your message. We ship within the United States and to Canada (5–8 business days), and a person from our team answers product questions within one business day.',
        `If your question is about an order, ${ask.charAt(0).toLowerCase()}${ask.slice(1)}`,
      );
  }
}

/** Cancel the order if it has not shipped, then refund it in full. */
function decideCancel(order: OrderView, last: Last, call: Call, reply: Reply): ModelDecision {
  const cancel = last<CancelResult>('cancel_order');
  if (!cancel) {
    if (order.status !== 'processing') {
      return reply(
        `Your order ${order.orderId} has already ${order.status === 'shipped' ? 'shipped' : 'been delivered'}, so it can no longer be cancelled. ${statusSentence(order)} Once it has arrived you can return it within 30 days for a refund.`,
      );
    }
    return call('cancel_order', { order_id: order.orderId });
  }
  if (!cancel.cancelled) return reply(`I could not cancel order ${order.orderId}: ${cancel.reason}.`);
  const refund = last<RefundToolResult>('issue_refund');
  const left = order.totalCents - order.refundedCents;
  if (!refund && left > 0) {
    return call('issue_refund', { order_id: order.orderId, amount_cents: left, reason: 'order cancelled' });
  }
  return reply(
    `Your order ${order.orderId} (${order.item}) is cancelled.`,
    refund ? refundSentence(refund) : 'Nothing had been charged for it.',
  );
}

/** Check the policy, refund what it allows, and say what happened. */
function decideRefund(
  order: OrderView,
  analysis: EmailAnalysis,
  last: Last,
  call: Call,
  reply: Reply,
): ModelDecision {
  const policy = last<PolicyResult>('check_refund_policy');
  if (!policy) {
    const requested = analysis.amountsCents[0];
    return call('check_refund_policy', {
      order_id: order.orderId,
      ...(requested === undefined ? {} : { amount_cents: requested }),
    });
  }
  if (!policy.eligible) {
    return reply(`I'm afraid I cannot refund order ${order.orderId}: ${policy.reason}.`);
  }
  const refund = last<RefundToolResult>('issue_refund');
  if (!refund) {
    return call('issue_refund', {
      order_id: order.orderId,
      amount_cents: policy.refundCents,
      reason: `customer request (${analysis.cues.join(', ')}) about the ${order.item}`,
    });
  }
  return reply(refundSentence(refund));
}

function refundSentence(refund: RefundToolResult): string {
  switch (refund.status) {
    case 'refunded':
      return `I have refunded ${usd(refund.amountCents)} for order ${refund.orderId} to the card you paid with (refund ${refund.refundId}${refund.approvedBy ? `, approved by ${refund.approvedBy}` : ''}). It usually shows on your statement within 5–10 business days.`;
    case 'declined':
      return `I could not refund order ${refund.orderId}: ${refund.reason}.`;
    case 'rejected':
      return `A member of our team reviewed the refund for order ${refund.orderId} and could not approve it${refund.note ? `: ${refund.note}` : ''}. If you have photos of the problem, reply with them and we will look again.`;
    case 'escalated':
      return `Your refund for order ${refund.orderId} needs a closer look, so I have handed it to a senior member of our team, who will contact you within one business day.`;
  }
}
