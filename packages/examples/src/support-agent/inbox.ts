import { z } from 'zod';

/** What a customer wants, as the agent's model reads it. */
export const INTENTS = ['refund', 'where-is-my-order', 'cancel', 'complaint', 'other'] as const;
export type Intent = (typeof INTENTS)[number];

/** An order number as the shop prints it. */
export const ORDER_ID = /^ORD-\d{5}$/;

const isoTime = z.iso.datetime({ message: 'must be an ISO 8601 UTC time, e.g. 2026-11-02T09:30:00Z' });

/** One order of the shop, as `data/orders.json` holds it and the example's `orders` table stores it. */
export const orderSchema = z
  .object({
    orderId: z.string().regex(ORDER_ID, 'must look like ORD-12345'),
    customerEmail: z.email('must be an email address'),
    customerName: z.string().min(1, 'is empty'),
    item: z.string().min(1, 'is empty'),
    quantity: z.number().int().positive(),
    /** In cents (the shop sells in US dollars only). */
    totalCents: z.number().int().positive(),
    currency: z.literal('USD'),
    /** Final-sale items are never refunded. */
    finalSale: z.boolean(),
    status: z.enum(['processing', 'shipped', 'delivered']),
    orderedAt: isoTime,
    shippedAt: isoTime.nullable(),
    deliveredAt: isoTime.nullable(),
    carrier: z.string().nullable(),
    trackingNumber: z.string().nullable(),
    estimatedDeliveryAt: isoTime.nullable(),
  })
  .strict();
export type Order = z.infer<typeof orderSchema>;

/** One email of the inbox, as `data/emails.json` holds it. */
export const customerEmailSchema = z
  .object({
    id: z.string().regex(/^EM-\d{4}$/, 'must look like EM-0001'),
    from: z.email('must be an email address'),
    name: z.string().min(1, 'is empty'),
    subject: z.string().max(200, 'is longer than 200 characters'),
    body: z.string().min(1, 'is empty').max(10_000, 'is longer than 10,000 characters'),
    receivedAt: isoTime,
  })
  .strict();
export type CustomerEmail = z.infer<typeof customerEmailSchema>;

/** The example's data files could not be used; the message names the file, the row and the field. */
export class InvalidInboxDataError extends Error {
  override readonly name = 'InvalidInboxDataError';
}

/** The orders and the inbox, checked. */
export interface InboxData {
  readonly orders: readonly Order[];
  readonly emails: readonly CustomerEmail[];
}

function parseRows<T>(
  fileName: string,
  text: string,
  schema: z.ZodType<T>,
  label: (row: unknown, index: number) => string,
): T[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new InvalidInboxDataError(`${fileName} is not JSON: ${(error as Error).message}`);
  }
  if (!Array.isArray(json)) throw new InvalidInboxDataError(`${fileName} must hold a JSON array of rows`);
  return json.map((row, index) => {
    const parsed = schema.safeParse(row);
    if (parsed.success) return parsed.data;
    const problems = parsed.error.issues.map((issue) => {
      const field = issue.path.join('.') || '(the row)';
      const value = issue.path.reduce<unknown>(
        (v, key) => (v && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[key] : undefined),
        row,
      );
      return `${field} ${value === undefined ? 'is missing' : `${JSON.stringify(value)} ${issue.message}`}`;
    });
    throw new InvalidInboxDataError(`${fileName}: ${label(row, index)}: ${problems.join('; ')}`);
  });
}

/** "row 7 (EM-0007)": a row's 1-based position and its id when it has one. */
function rowLabel(idField: string): (row: unknown, index: number) => string {
  return (row, index) => {
    const id = (row as Record<string, unknown> | null)?.[idField];
    return `row ${index + 1}${typeof id === 'string' ? ` (${id})` : ''}`;
  };
}

/**
 * Parse and check the example's data: `ordersJson` (an array of {@link Order}) and `emailsJson` (an array of
 * {@link CustomerEmail}). Order numbers and email ids must be unique.
 * @throws InvalidInboxDataError naming the file, the row (position and id) and each bad field with its value.
 */
export function parseInboxData(ordersJson: string, emailsJson: string): InboxData {
  const orders = parseRows('orders.json', ordersJson, orderSchema, rowLabel('orderId'));
  const emails = parseRows('emails.json', emailsJson, customerEmailSchema, rowLabel('id'));
  for (const [fileName, ids] of [
    ['orders.json', orders.map((o) => o.orderId)],
    ['emails.json', emails.map((e) => e.id)],
  ] as const) {
    const seen = new Map<string, number>();
    for (const [index, id] of ids.entries()) {
      const earlier = seen.get(id);
      if (earlier !== undefined) {
        throw new InvalidInboxDataError(
          `${fileName}: row ${index + 1} (${id}): id ${id} already appeared in row ${earlier + 1}`,
        );
      }
      seen.set(id, index);
    }
  }
  return { orders, emails };
}
