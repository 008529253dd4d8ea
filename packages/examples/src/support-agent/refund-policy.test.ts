import { describe, expect, it } from 'vitest';
import { decideRefund, type PolicyOrder } from './refund-policy.js';

const asOf = new Date('2026-11-04T12:00:00Z');
const delivered = (daysAgo: number, over: Partial<PolicyOrder> = {}): PolicyOrder => ({
  status: 'delivered',
  finalSale: false,
  deliveredAt: new Date(asOf.getTime() - daysAgo * 86_400_000).toISOString(),
  totalCents: 40_000,
  refundedCents: 0,
  ...over,
});

describe('the refund policy', () => {
  it('refunds a delivered order within 30 days, in full or as asked, with approval above the threshold', () => {
    expect(decideRefund(delivered(30), asOf, undefined, 25_000)).toMatchObject({
      eligible: true,
      refundCents: 40_000,
      maxRefundableCents: 40_000,
      approvalRequired: true,
    });
    expect(decideRefund(delivered(3), asOf, 5_000, 25_000)).toMatchObject({
      refundCents: 5_000,
      approvalRequired: false,
    });
    expect(decideRefund(delivered(3, { refundedCents: 30_000 }), asOf, 20_000, 25_000)).toMatchObject({
      eligible: true,
      refundCents: 10_000,
      maxRefundableCents: 10_000,
    });
  });

  it('refuses late, final-sale, undelivered and fully refunded orders', () => {
    const refused = (order: PolicyOrder) => decideRefund(order, asOf, undefined, 25_000);
    expect(refused(delivered(31))).toMatchObject({ eligible: false, refundCents: 0 });
    expect(refused(delivered(31)).reason).toMatch(/31 days ago, outside the 30-day refund window/);
    expect(refused(delivered(2, { finalSale: true })).reason).toMatch(/final sale/);
    expect(refused(delivered(2, { refundedCents: 40_000 })).reason).toMatch(/already been refunded/);
    expect(refused({ ...delivered(0), status: 'processing', deliveredAt: null }).reason).toMatch(
      /cancel it instead/,
    );
    expect(refused({ ...delivered(0), status: 'shipped', deliveredAt: null }).reason).toMatch(
      /once it has been delivered/,
    );
  });

  it('refunds a cancelled order in full', () => {
    expect(
      decideRefund({ ...delivered(0), status: 'cancelled', deliveredAt: null }, asOf, undefined, 25_000),
    ).toMatchObject({
      eligible: true,
      refundCents: 40_000,
    });
  });
});
