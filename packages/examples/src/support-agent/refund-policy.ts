/** The shop's refund policy, as pure arithmetic over an order: no database, testable alone. */

/** Days after delivery within which a delivered order can be refunded. */
export const REFUND_WINDOW_DAYS = 30;

/** The order as the policy needs it. */
export interface PolicyOrder {
  readonly status: 'processing' | 'shipped' | 'delivered' | 'cancelled';
  readonly finalSale: boolean;
  /** ISO 8601, or null before delivery. */
  readonly deliveredAt: string | null;
  readonly totalCents: number;
  readonly refundedCents: number;
}

/** What the policy allows for one request. */
export interface PolicyVerdict {
  readonly eligible: boolean;
  /** Why, in a sentence the agent can pass on. */
  readonly reason: string;
  /** The most that may be refunded now (0 when not eligible). */
  readonly maxRefundableCents: number;
  /** The amount a refund would be: the request capped at the maximum, or the maximum when none was asked for. */
  readonly refundCents: number;
  /** Whether that refund needs a person's approval (it is above `approvalThresholdCents`). */
  readonly approvalRequired: boolean;
}

const DAY_MS = 86_400_000;

/**
 * Decide whether `order` may be refunded as of `asOf` (the time the customer wrote), and how much. Refundable: a
 * delivered order within {@link REFUND_WINDOW_DAYS} of delivery, and a cancelled order (in full); never a final-sale
 * item, nor more than what is left after earlier refunds. A processing order must be cancelled first; a shipped one
 * can be refunded once delivered. A refund above `approvalThresholdCents` needs a person's approval.
 */
export function decideRefund(
  order: PolicyOrder,
  asOf: Date,
  requestedCents: number | undefined,
  approvalThresholdCents: number,
): PolicyVerdict {
  const left = order.totalCents - order.refundedCents;
  const refuse = (reason: string): PolicyVerdict => ({
    eligible: false,
    reason,
    maxRefundableCents: 0,
    refundCents: 0,
    approvalRequired: false,
  });
  if (order.finalSale) return refuse('the item was sold as final sale, which is not refundable');
  if (left <= 0) return refuse('the order has already been refunded in full');
  if (order.status === 'processing') {
    return refuse('the order has not shipped yet: cancel it instead, and it is refunded in full');
  }
  if (order.status === 'shipped') {
    return refuse('the order is on its way: it can be refunded once it has been delivered');
  }
  let reason = 'the order was cancelled, so it is refunded in full';
  if (order.status === 'delivered') {
    const days = order.deliveredAt
      ? Math.floor((asOf.getTime() - Date.parse(order.deliveredAt)) / DAY_MS)
      : 0;
    if (days > REFUND_WINDOW_DAYS) {
      return refuse(
        `the order was delivered ${days} days ago, outside the ${REFUND_WINDOW_DAYS}-day refund window`,
      );
    }
    reason = `the order was delivered ${days} day${days === 1 ? '' : 's'} ago, within the ${REFUND_WINDOW_DAYS}-day refund window`;
  }
  const refundCents = requestedCents === undefined ? left : Math.min(requestedCents, left);
  if (requestedCents !== undefined && requestedCents > left) {
    reason += `; at most ${left} cents are left to refund`;
  }
  return {
    eligible: true,
    reason,
    maxRefundableCents: left,
    refundCents,
    approvalRequired: refundCents > approvalThresholdCents,
  };
}
