import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { EMAILS_JSON_PATH, ORDERS_JSON_PATH, generateInbox, inboxFiles } from './data/generate-inbox.js';
import { analyzeEmail } from './email-analysis.js';
import { InvalidInboxDataError, parseInboxData } from './inbox.js';

const ordersJson = readFileSync(ORDERS_JSON_PATH, 'utf8');
const emailsJson = readFileSync(EMAILS_JSON_PATH, 'utf8');

describe('the inbox data', () => {
  it('is what the generator writes, and parses: 112 emails about 110 orders', () => {
    const files = inboxFiles(generateInbox());
    expect(files.orders).toBe(ordersJson);
    expect(files.emails).toBe(emailsJson);
    const data = parseInboxData(ordersJson, emailsJson);
    expect(data.emails).toHaveLength(112);
    expect(data.orders).toHaveLength(110);
  });

  it('names the file, the row and the field of a bad value', () => {
    const emails = JSON.parse(emailsJson) as Record<string, unknown>[];
    emails[16] = { ...emails[16], receivedAt: 'yesterday' };
    expect(() => parseInboxData(ordersJson, JSON.stringify(emails))).toThrow(
      new InvalidInboxDataError(
        'emails.json: row 17 (EM-0017): receivedAt "yesterday" must be an ISO 8601 UTC time, e.g. 2026-11-02T09:30:00Z',
      ),
    );
    const orders = JSON.parse(ordersJson) as Record<string, unknown>[];
    const { totalCents: _, ...withoutTotal } = orders[3] ?? {};
    orders[3] = withoutTotal;
    expect(() => parseInboxData(JSON.stringify(orders), emailsJson)).toThrow(
      /^orders\.json: row 4 \(ORD-\d{5}\): totalCents is missing$/,
    );
  });

  it('refuses a repeated id and a file that is not a JSON array', () => {
    const emails = JSON.parse(emailsJson) as unknown[];
    expect(() => parseInboxData(ordersJson, JSON.stringify([...emails, emails[0]]))).toThrow(
      'emails.json: row 113 (EM-0001): id EM-0001 already appeared in row 1',
    );
    expect(() => parseInboxData('{"orders":[]}', emailsJson)).toThrow(
      'orders.json must hold a JSON array of rows',
    );
    expect(() => parseInboxData('[', emailsJson)).toThrow(/^orders\.json is not JSON/);
  });
});

describe('reading an email with wink-nlp', () => {
  it('finds the intent each email was written with, for all 112', () => {
    const inbox = generateInbox();
    const wrong = inbox.emails
      .map((e) => ({
        id: e.id,
        want: inbox.intents.get(e.id),
        got: analyzeEmail(`${e.subject}\n\n${e.body}`).intent,
      }))
      .filter((r) => r.want !== r.got);
    expect(wrong).toEqual([]);
  });

  it('finds order numbers, amounts and a negative sentiment', () => {
    const a = analyzeEmail(
      'I am furious. Please refund $1,249.50 for #ORD-52859 and ord 12345, it was a disaster.',
    );
    expect(a.intent).toBe('refund');
    expect(a.orderIds).toEqual(['ORD-52859', 'ORD-12345']);
    expect(a.amountsCents).toEqual([124_950]);
    expect(a.sentiment).toBeLessThan(0);
    expect(
      analyzeEmail('The noise-cancelling headphones have not arrived yet: when will they be delivered?')
        .intent,
    ).toBe('where-is-my-order');
    expect(analyzeEmail('Honestly appalled. Cheap, flimsy and nothing like the photos.').intent).toBe(
      'complaint',
    );
  });
});
