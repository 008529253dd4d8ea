/**
 * Generates the support-agent example's data next to this file: `orders.json` (the shop's orders, seeded into the
 * example's own tables) and `emails.json` (the inbox: 112 customer emails about them). The emails are written from
 * templates in the voices customers use — refunds small and large, late parcels, cancellations, angry complaints,
 * questions with no order number, order numbers that do not exist or belong to someone else — and each one's
 * scenario is chosen so that the inbox exercises every path of the agent. Deterministic: a seeded PRNG, so running
 * it again rewrites the same bytes. Both files are committed; run this only to change them:
 *
 *   pnpm --filter @palisade/examples inbox:generate
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mulberry32 } from '../../shared/seeded-random.js';
import type { CustomerEmail, Intent, Order } from '../inbox.js';

const SEED = 0x20261102;
const DAY_MS = 86_400_000;
/** The inbox's time window: the emails arrive between these two instants. */
const INBOX_FROM_MS = Date.UTC(2026, 10, 2, 7, 30);
const INBOX_TO_MS = Date.UTC(2026, 10, 6, 18, 0);

type Random = () => number;

const pick = <T>(random: Random, items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
const between = (random: Random, min: number, max: number): number =>
  min + Math.floor(random() * (max - min + 1));

interface Product {
  readonly name: string;
  readonly priceCents: number;
  readonly finalSale?: boolean;
}

/** What the shop sells: everyday items (refunds under the approval threshold) and big-ticket ones (above it). */
const SMALL: readonly Product[] = [
  { name: 'ceramic pour-over coffee set', priceCents: 3_499 },
  { name: 'bamboo cutting board', priceCents: 2_899 },
  { name: 'wireless earbuds', priceCents: 7_999 },
  { name: 'yoga mat', priceCents: 4_550 },
  { name: 'insulated water bottle', priceCents: 2_495 },
  { name: 'LED desk lamp', priceCents: 5_999 },
  { name: 'cotton bath towel set', priceCents: 6_400 },
  { name: 'trail running shoes', priceCents: 11_900 },
  { name: 'waterproof backpack', priceCents: 8_900 },
  { name: 'bluetooth speaker', priceCents: 12_999 },
  { name: 'cast iron skillet', priceCents: 4_999 },
  { name: 'wool throw blanket', priceCents: 5_900 },
  { name: "kids' rain jacket", priceCents: 4_200 },
  { name: 'electric kettle', priceCents: 6_999 },
  { name: "chef's knife", priceCents: 14_500 },
  { name: 'air fryer', priceCents: 18_999 },
  { name: 'hiking boots', priceCents: 21_900 },
  { name: 'mechanical keyboard', priceCents: 16_900 },
];
const LARGE: readonly Product[] = [
  { name: 'espresso machine', priceCents: 64_900 },
  { name: 'standing desk', priceCents: 52_900 },
  { name: 'robot vacuum', priceCents: 42_900 },
  { name: '27-inch 4K monitor', priceCents: 38_900 },
  { name: 'ergonomic office chair', priceCents: 31_900 },
  { name: 'noise-cancelling headphones', priceCents: 34_900 },
  { name: 'stand mixer', priceCents: 44_900 },
  { name: 'electric scooter', priceCents: 79_900 },
  { name: 'down parka', priceCents: 27_900 },
];
const FINAL_SALE: readonly Product[] = [
  { name: 'clearance linen dress', priceCents: 3_900, finalSale: true },
  { name: 'engraved leather wallet', priceCents: 6_500, finalSale: true },
  { name: 'custom name necklace', priceCents: 8_800, finalSale: true },
];

const FIRST = [
  'Maria',
  'James',
  'Aisha',
  'Chen',
  'Olivia',
  'Liam',
  'Sofia',
  'Noah',
  'Priya',
  'Mateo',
  'Emma',
  'Lucas',
  'Fatima',
  'Hiroshi',
  'Grace',
  'Daniel',
  'Amara',
  'Ethan',
  'Ingrid',
  'Omar',
  'Zoe',
  'Kwame',
  'Lena',
  'Diego',
  'Hannah',
  'Ravi',
  'Chloe',
  'Samuel',
  'Yara',
  'Tomás',
];
const LAST = [
  'Gonzalez',
  'Walker',
  'Okafor',
  'Wei',
  'Bennett',
  'Murphy',
  'Rossi',
  'Kim',
  'Sharma',
  'Silva',
  'Fischer',
  'Dubois',
  'Haddad',
  'Tanaka',
  'Kowalski',
  'Nguyen',
  'Mensah',
  'Larsen',
  'Costa',
  'Novak',
];
const DOMAINS = ['example.com', 'example.org', 'example.net', 'mail.example'];
const CARRIERS = ['UPS', 'FedEx', 'USPS', 'DHL'];

interface Customer {
  readonly name: string;
  readonly first: string;
  readonly email: string;
}

/** One email's scenario: what the customer asks and what state their order is in. */
type Scenario =
  | 'refund-small'
  | 'refund-partial'
  | 'refund-large'
  | 'refund-outside-window'
  | 'refund-final-sale'
  | 'where-shipped'
  | 'where-processing'
  | 'where-delivered'
  | 'cancel-processing'
  | 'cancel-shipped'
  | 'complaint'
  | 'unknown-order'
  | 'not-their-order'
  | 'no-order-number';

/** How many emails of each scenario the inbox holds (112 in all). */
const SCENARIOS: readonly (readonly [Scenario, number])[] = [
  ['refund-small', 28],
  ['refund-partial', 4],
  ['refund-large', 8],
  ['refund-outside-window', 5],
  ['refund-final-sale', 3],
  ['where-shipped', 14],
  ['where-processing', 8],
  ['where-delivered', 6],
  ['cancel-processing', 8],
  ['cancel-shipped', 4],
  ['complaint', 8],
  ['unknown-order', 6],
  ['not-their-order', 2],
  ['no-order-number', 8],
];

/** Email bodies by intent. `{order}`, `{item}`, `{amount}`, `{first}`, `{name}`, `{days}` are filled in. */
const TEMPLATES: Record<Exclude<Intent, 'other'>, readonly { subject: string; body: string }[]> = {
  refund: [
    {
      subject: 'Damaged item - order {order}',
      body: "Hi,\n\nI received my {item} (order {order}) yesterday and it arrived damaged: the box was crushed and the {item} is cracked. I'd like a refund please.\n\nThanks,\n{first}",
    },
    {
      subject: 'Refund request',
      body: "Hello,\n\nOrder {order}: the {item} doesn't work as described. Could you refund the full amount to my card?\n\nBest regards,\n{name}",
    },
    {
      subject: 'Returning my {item}',
      body: "Hey there, I want to return the {item} from order {order} and get my money back. It's just not what I expected.\n\n{first}",
    },
    {
      subject: 'Refund for {order}',
      body: "Good morning,\n\nI'm requesting a refund for order {order}. The {item} stopped working after two days.\n\nKind regards,\n{name}",
    },
    {
      subject: 'Wrong size',
      body: 'Hi! The {item} I bought (order {order}) was the wrong size. Can I get a refund of {amount}? Thank you!\n\n{first}',
    },
    {
      subject: 'Please refund {amount}',
      body: 'Hello support,\n\nPlease refund {amount} for order {order}. The {item} arrived with a missing part and I would rather not wait for a replacement.\n\n{name}',
    },
  ],
  'where-is-my-order': [
    {
      subject: 'Where is my order?',
      body: "Hi, where is my order {order}? I ordered it {days} days ago and haven't heard anything since.\n\n{first}",
    },
    {
      subject: 'Order {order} status',
      body: 'Hello, can you tell me the status of order {order}? I am waiting for my {item}.\n\nThanks,\n{name}',
    },
    {
      subject: 'Has it shipped?',
      body: 'Has my package shipped yet? Order number {order}. Thanks, {first}',
    },
    {
      subject: 'Tracking not updating',
      body: "Hi team, the tracking for {order} hasn't updated in a while. When will my {item} arrive?\n\n{name}",
    },
    {
      subject: 'Delivery date',
      body: 'Quick question: when will order {order} be delivered? I need the {item} before the weekend.\n\n{first}',
    },
  ],
  cancel: [
    {
      subject: 'Cancel order {order}',
      body: 'Please cancel my order {order}. I ordered the {item} by mistake.\n\n{name}',
    },
    {
      subject: 'Cancellation',
      body: "Hi, I'd like to cancel order {order}, I found the {item} cheaper locally. Thanks.\n\n{first}",
    },
    {
      subject: 'Too late to cancel?',
      body: "Hello, is it too late to cancel {order}? I don't need the {item} anymore.\n\nRegards,\n{name}",
    },
    {
      subject: 'Changed my mind',
      body: 'Cancel order {order} please, I changed my mind about the {item}.\n\n{first}',
    },
  ],
  complaint: [
    {
      subject: 'Very disappointed',
      body: "This is the third time I've had a problem with your store. The {item} from order {order} is terrible quality and your customer service has been useless. I am extremely disappointed and frustrated.\n\n{name}",
    },
    {
      subject: 'Awful experience',
      body: 'I am furious. Order {order} was a disaster from start to finish: the courier was rude, the box was soaked and the {item} smells awful. Worst shopping experience I have ever had.\n\n{first}',
    },
    {
      subject: 'Not what was advertised',
      body: 'Honestly appalled by the {item} I got in order {order}. Cheap, flimsy and nothing like the photos. I expected much better from you.\n\n{name}',
    },
    {
      subject: 'Unacceptable',
      body: 'Your delivery driver threw my parcel for order {order} over the fence and dented the {item}. This is unacceptable and I want to speak to a manager.\n\n{name}',
    },
  ],
};

/** Emails with no order number: questions the agent can only answer by asking for one. */
const NO_ORDER: readonly { subject: string; body: string; intent: Intent }[] = [
  {
    subject: 'Shipping to Canada',
    body: 'Hi, do you ship to Canada? And how long does it usually take?\n\n{first}',
    intent: 'other',
  },
  {
    subject: 'Strange noise',
    body: 'Hello, I bought a {item} from you last month and it is making a weird noise. What should I do?\n\n{name}',
    intent: 'other',
  },
  {
    subject: 'Change of address',
    body: 'Can I change the shipping address on my order? I am moving next week. Thanks, {first}',
    intent: 'other',
  },
  {
    subject: 'Colours',
    body: 'Do you have the {item} in blue or green? Thank you.\n\n{name}',
    intent: 'other',
  },
  {
    subject: 'Refund?',
    body: 'Hi, I would like a refund for the {item} I bought, it broke after a week. {first}',
    intent: 'refund',
  },
  {
    subject: 'Where is my parcel',
    body: 'Where is my parcel?? I ordered a {item} ages ago and nothing has arrived.\n\n{first}',
    intent: 'where-is-my-order',
  },
];

function formatUsd(cents: number): string {
  return `$${(cents / 100).toFixed(2)}`;
}

function iso(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function fill(text: string, values: Record<string, string>): string {
  return text.replace(/\{(\w+)\}/g, (_, key: string) => values[key] ?? `{${key}}`);
}

function makeCustomers(random: Random, count: number): Customer[] {
  const seen = new Set<string>();
  const customers: Customer[] = [];
  while (customers.length < count) {
    const first = pick(random, FIRST);
    const last = pick(random, LAST);
    if (seen.has(`${first} ${last}`)) continue;
    seen.add(`${first} ${last}`);
    const local = `${first}.${last}`
      .normalize('NFD')
      .replace(/[^A-Za-z.]/g, '')
      .toLowerCase();
    customers.push({ name: `${first} ${last}`, first, email: `${local}@${pick(random, DOMAINS)}` });
  }
  return customers;
}

/** What {@link generateInbox} makes: the orders, the emails, and each email's intent as the templates wrote it. */
export interface GeneratedInbox {
  readonly orders: Order[];
  readonly emails: CustomerEmail[];
  /** By email id: the intent of the template the email was written from (ground truth for the offline model). */
  readonly intents: ReadonlyMap<string, Intent>;
}

/** The orders and the inbox; the same `seed` gives the same data. */
export function generateInbox(seed = SEED): GeneratedInbox {
  const random = mulberry32(seed);
  const customers = makeCustomers(random, 60);
  const usedIds = new Set<string>();
  const orderId = (): string => {
    for (;;) {
      const id = `ORD-${between(random, 10_000, 99_999)}`;
      if (!usedIds.has(id)) {
        usedIds.add(id);
        return id;
      }
    }
  };
  const orders: Order[] = [];
  const addOrder = (
    customer: Customer,
    product: Product,
    state: 'processing' | 'shipped' | 'delivered',
    receivedMs: number,
    deliveredDaysAgo: readonly [number, number] = [2, 20],
  ): Order => {
    const deliveredMs =
      receivedMs -
      between(random, deliveredDaysAgo[0], deliveredDaysAgo[1]) * DAY_MS -
      between(random, 0, 8) * 3_600_000;
    const shippedMs =
      state === 'delivered'
        ? deliveredMs - between(random, 2, 5) * DAY_MS
        : receivedMs - between(random, 1, 5) * DAY_MS;
    const orderedMs =
      state === 'processing'
        ? receivedMs - between(random, 3, 40) * 3_600_000
        : shippedMs - between(random, 1, 3) * DAY_MS;
    const quantity = product.priceCents < 3_000 && random() < 0.3 ? 2 : 1;
    const order: Order = {
      orderId: orderId(),
      customerEmail: customer.email,
      customerName: customer.name,
      item: product.name,
      quantity,
      totalCents: product.priceCents * quantity,
      currency: 'USD',
      finalSale: product.finalSale === true,
      status: state,
      orderedAt: iso(orderedMs),
      shippedAt: state === 'processing' ? null : iso(shippedMs),
      deliveredAt: state === 'delivered' ? iso(deliveredMs) : null,
      carrier: state === 'processing' ? null : pick(random, CARRIERS),
      trackingNumber: state === 'processing' ? null : `1Z${between(random, 100_000_000, 999_999_999)}`,
      estimatedDeliveryAt: state === 'shipped' ? iso(receivedMs + between(random, 1, 4) * DAY_MS) : null,
    };
    orders.push(order);
    return order;
  };

  const drafts: { receivedMs: number; customer: Customer; subject: string; body: string; intent: Intent }[] =
    [];
  const write = (
    customer: Customer,
    receivedMs: number,
    intent: Exclude<Intent, 'other'>,
    values: { order: string; item: string; amount?: string; days?: string },
    template?: { subject: string; body: string },
  ): void => {
    const chosen =
      template ??
      pick(
        random,
        TEMPLATES[intent].filter((t) => values.amount !== undefined || !t.body.includes('{amount}')),
      );
    const all = {
      ...values,
      first: customer.first,
      name: customer.name,
      days: values.days ?? String(between(random, 5, 12)),
    };
    drafts.push({
      receivedMs,
      customer,
      subject: fill(chosen.subject, all),
      body: fill(chosen.body, all),
      intent,
    });
  };
  const refundTemplates = TEMPLATES.refund;
  const withAmount = refundTemplates.filter((t) => t.body.includes('{amount}'));
  const withoutAmount = refundTemplates.filter((t) => !t.body.includes('{amount}'));

  for (const [scenario, count] of SCENARIOS) {
    for (let i = 0; i < count; i++) {
      const customer = pick(random, customers);
      const receivedMs = INBOX_FROM_MS + Math.floor(random() * (INBOX_TO_MS - INBOX_FROM_MS));
      switch (scenario) {
        case 'refund-small':
        case 'refund-large': {
          const order = addOrder(
            customer,
            pick(random, scenario === 'refund-small' ? SMALL : LARGE),
            'delivered',
            receivedMs,
          );
          const mentionAmount = random() < 0.4;
          write(
            customer,
            receivedMs,
            'refund',
            { order: order.orderId, item: order.item, amount: formatUsd(order.totalCents) },
            pick(random, mentionAmount ? withAmount : withoutAmount),
          );
          break;
        }
        case 'refund-partial': {
          const order = addOrder(customer, pick(random, LARGE), 'delivered', receivedMs);
          const partCents = between(random, 15, 90) * 100 + pick(random, [0, 49, 99]);
          write(
            customer,
            receivedMs,
            'refund',
            { order: order.orderId, item: order.item, amount: formatUsd(partCents) },
            pick(random, withAmount),
          );
          break;
        }
        case 'refund-outside-window': {
          const order = addOrder(customer, pick(random, SMALL), 'delivered', receivedMs, [45, 120]);
          write(
            customer,
            receivedMs,
            'refund',
            { order: order.orderId, item: order.item },
            pick(random, withoutAmount),
          );
          break;
        }
        case 'refund-final-sale': {
          const order = addOrder(customer, pick(random, FINAL_SALE), 'delivered', receivedMs);
          write(
            customer,
            receivedMs,
            'refund',
            { order: order.orderId, item: order.item },
            pick(random, withoutAmount),
          );
          break;
        }
        case 'where-shipped':
        case 'where-processing':
        case 'where-delivered': {
          const state =
            scenario === 'where-shipped'
              ? 'shipped'
              : scenario === 'where-processing'
                ? 'processing'
                : 'delivered';
          const order = addOrder(customer, pick(random, [...SMALL, ...LARGE]), state, receivedMs, [1, 3]);
          write(customer, receivedMs, 'where-is-my-order', { order: order.orderId, item: order.item });
          break;
        }
        case 'cancel-processing':
        case 'cancel-shipped': {
          const state = scenario === 'cancel-processing' ? 'processing' : 'shipped';
          const order = addOrder(customer, pick(random, SMALL), state, receivedMs);
          write(customer, receivedMs, 'cancel', { order: order.orderId, item: order.item });
          break;
        }
        case 'complaint': {
          const order = addOrder(customer, pick(random, [...SMALL, ...LARGE]), 'delivered', receivedMs);
          write(customer, receivedMs, 'complaint', { order: order.orderId, item: order.item });
          break;
        }
        case 'unknown-order': {
          // A mistyped or invented number: no order has it.
          const missing = orderId();
          const intent = pick(random, ['refund', 'where-is-my-order'] as const);
          write(
            customer,
            receivedMs,
            intent,
            { order: missing, item: pick(random, SMALL).name },
            intent === 'refund' ? pick(random, withoutAmount) : undefined,
          );
          break;
        }
        case 'not-their-order': {
          // Someone else's order number (a family member's, or a typo that hits a real order).
          const owner = customers.find((c) => c.email !== customer.email) ?? customer;
          const order = addOrder(owner, pick(random, SMALL), 'shipped', receivedMs);
          write(customer, receivedMs, 'where-is-my-order', { order: order.orderId, item: order.item });
          break;
        }
        case 'no-order-number': {
          const template = NO_ORDER[i % NO_ORDER.length] as (typeof NO_ORDER)[number];
          const values = { first: customer.first, name: customer.name, item: pick(random, SMALL).name };
          drafts.push({
            receivedMs,
            customer,
            subject: fill(template.subject, values),
            body: fill(template.body, values),
            intent: template.intent,
          });
          break;
        }
      }
    }
  }
  // Orders nobody writes about, as in any shop.
  for (let i = 0; i < 12; i++) {
    const state = pick(random, ['processing', 'shipped', 'delivered'] as const);
    addOrder(pick(random, customers), pick(random, [...SMALL, ...LARGE]), state, INBOX_FROM_MS);
  }

  drafts.sort((a, b) => a.receivedMs - b.receivedMs);
  const intents = new Map<string, Intent>();
  const emails = drafts.map((d, i): CustomerEmail => {
    const id = `EM-${String(i + 1).padStart(4, '0')}`;
    intents.set(id, d.intent);
    return {
      id,
      from: d.customer.email,
      name: d.customer.name,
      subject: d.subject,
      body: d.body,
      receivedAt: iso(d.receivedMs),
    };
  });
  orders.sort((a, b) => a.orderId.localeCompare(b.orderId));
  return { orders, emails, intents };
}

/** Where the committed files live. */
export const ORDERS_JSON_PATH = fileURLToPath(new URL('./orders.json', import.meta.url));
export const EMAILS_JSON_PATH = fileURLToPath(new URL('./emails.json', import.meta.url));

/** The files' text: JSON, two-space indented, one trailing newline. */
export function inboxFiles(inbox: GeneratedInbox): { orders: string; emails: string } {
  return {
    orders: `${JSON.stringify(inbox.orders, null, 2)}\n`,
    emails: `${JSON.stringify(inbox.emails, null, 2)}\n`,
  };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const files = inboxFiles(generateInbox());
  writeFileSync(ORDERS_JSON_PATH, files.orders);
  writeFileSync(EMAILS_JSON_PATH, files.emails);
  console.log(`wrote ${ORDERS_JSON_PATH} and ${EMAILS_JSON_PATH}`);
}
