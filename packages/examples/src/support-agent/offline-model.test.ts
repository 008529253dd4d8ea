import { describe, expect, it } from 'vitest';
import type { ChatMessage, ModelDecision } from './agent-model.js';
import { decideOffline } from './offline-model.js';

const email = (subject: string, body: string): ChatMessage[] => [
  { role: 'system', content: 'You are the support agent.' },
  {
    role: 'user',
    content: `From: Maria Gonzalez <maria@example.com>\nReceived: 2026-11-04T10:00:00Z\nSubject: ${subject}\n\n${body}`,
  },
];

/** Append the decision's tool call and `result` to the conversation, as the workflow does. */
function answer(messages: ChatMessage[], decision: ModelDecision, result: unknown): void {
  if (decision.type !== 'tool_calls')
    throw new Error(`expected a tool call, got ${JSON.stringify(decision)}`);
  messages.push({ role: 'assistant', content: null, tool_calls: decision.calls });
  for (const call of decision.calls) {
    messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify(result) });
  }
}

/** `[tool, arguments]` of the decision's first call, or `['answer']`. */
function toolOf(d: ModelDecision): [string, unknown?] {
  if (d.type === 'answer') return ['answer'];
  const call = d.calls[0];
  return [call?.function.name ?? '', JSON.parse(call?.function.arguments ?? '{}') as unknown];
}

const order = {
  orderId: 'ORD-12345',
  item: 'yoga mat',
  quantity: 1,
  totalCents: 4_550,
  status: 'delivered',
  finalSale: false,
  orderedAt: '2026-10-20T10:00:00Z',
  shippedAt: '2026-10-21T10:00:00Z',
  deliveredAt: '2026-10-24T10:00:00Z',
  carrier: 'UPS',
  trackingNumber: '1Z123',
  estimatedDeliveryAt: null,
  refundedCents: 0,
};

describe('the offline model', () => {
  it('looks the order up, checks the policy, refunds the amount asked for, then answers', () => {
    const messages = email(
      'Refund',
      'Hi, the yoga mat from order ORD-12345 is torn. Can I get a refund of $20.00?',
    );
    let d = decideOffline(messages);
    expect(toolOf(d)).toEqual(['lookup_order', { order_id: 'ORD-12345' }]);
    answer(messages, d, { found: true, orderId: 'ORD-12345', belongsToSender: true, order });
    d = decideOffline(messages);
    expect(toolOf(d)).toEqual(['check_refund_policy', { order_id: 'ORD-12345', amount_cents: 2_000 }]);
    answer(messages, d, {
      orderId: 'ORD-12345',
      found: true,
      eligible: true,
      reason: 'ok',
      maxRefundableCents: 4_550,
      refundCents: 2_000,
      approvalRequired: false,
      approvalThresholdCents: 25_000,
    });
    d = decideOffline(messages);
    expect(toolOf(d)[0]).toBe('issue_refund');
    expect(toolOf(d)[1]).toMatchObject({ order_id: 'ORD-12345', amount_cents: 2_000 });
    expect(d.type === 'tool_calls' && d.calls[0]?.id).toBe('call_3');
    answer(messages, d, {
      status: 'refunded',
      orderId: 'ORD-12345',
      refundId: 're_1',
      amountCents: 2_000,
      approvedBy: null,
    });
    d = decideOffline(messages);
    expect(d.type).toBe('answer');
    expect(d.type === 'answer' && d.content).toMatch(
      /^Hi Maria,[\s\S]*refunded \$20\.00 for order ORD-12345[\s\S]*Customer Support$/,
    );
  });

  it("escalates an angry complaint, asks for a missing order number, and refuses to discuss another customer's order", () => {
    const angry = email('Unacceptable', 'I am furious, order ORD-12345 was a disaster and I want a manager.');
    const d = decideOffline(angry);
    expect(toolOf(d)[0]).toBe('escalate_to_human');
    answer(angry, d, { escalated: true, ticket: 'ESC-00001' });
    expect(decideOffline(angry)).toMatchObject({
      type: 'answer',
      content: expect.stringContaining('ESC-00001') as string,
    });

    expect(decideOffline(email('Refund?', 'I would like a refund for the kettle, it broke.'))).toMatchObject({
      type: 'answer',
      content: expect.stringContaining('reply with your order number') as string,
    });

    const other = email('Status', 'Where is my order ORD-12345?');
    answer(other, decideOffline(other), {
      found: true,
      orderId: 'ORD-12345',
      belongsToSender: false,
      order: null,
    });
    expect(decideOffline(other)).toMatchObject({
      content: expect.stringContaining('not linked to this email address') as string,
    });
  });

  it('cancels an unshipped order and refunds it in full', () => {
    const messages = email('Cancel', 'Please cancel my order ORD-12345.');
    answer(messages, decideOffline(messages), {
      found: true,
      orderId: 'ORD-12345',
      belongsToSender: true,
      order: { ...order, status: 'processing', deliveredAt: null, shippedAt: null },
    });
    let d = decideOffline(messages);
    expect(toolOf(d)).toEqual(['cancel_order', { order_id: 'ORD-12345' }]);
    answer(messages, d, {
      orderId: 'ORD-12345',
      cancelled: true,
      status: 'cancelled',
      reason: 'the order is cancelled',
    });
    d = decideOffline(messages);
    expect(toolOf(d)).toEqual([
      'issue_refund',
      { order_id: 'ORD-12345', amount_cents: 4_550, reason: 'order cancelled' },
    ]);
  });
});
