import { bigint, bigserial, boolean, integer, jsonb, pgSchema, text, timestamp } from 'drizzle-orm/pg-core';
import { quoteIdent } from '../invoice-settlement/tables.js';

/**
 * The shop's tables, in their own Postgres schema next to the engine's: orders (seeded from `data/orders.json`),
 * the refund ledger, the outbox of replies, escalations to people, approval requests, and the log of the agent's
 * steps. Defined with drizzle; {@link supportTablesDdl} creates them. Activities write them only through
 * `ctx.fencedTransaction`.
 *
 * Like the invoice example's ledger, the refund ledger and the outbox have no unique key on the email: "one refund
 * per approved email" and "one reply per email" are what fencing and the activities' own checks must achieve, and
 * what the demo verifies — a unique index would turn a stale writer's duplicate into a constraint error and hide
 * whether the fence worked.
 */
export function supportTables(schemaName: string) {
  const schema = pgSchema(schemaName);

  const orders = schema.table('orders', {
    orderId: text('order_id').primaryKey(),
    customerEmail: text('customer_email').notNull(),
    customerName: text('customer_name').notNull(),
    item: text('item').notNull(),
    quantity: integer('quantity').notNull(),
    totalCents: bigint('total_cents', { mode: 'number' }).notNull(),
    currency: text('currency').notNull(),
    finalSale: boolean('final_sale').notNull(),
    status: text('status').$type<'processing' | 'shipped' | 'delivered' | 'cancelled'>().notNull(),
    orderedAt: timestamp('ordered_at', { withTimezone: true, mode: 'string' }).notNull(),
    shippedAt: timestamp('shipped_at', { withTimezone: true, mode: 'string' }),
    deliveredAt: timestamp('delivered_at', { withTimezone: true, mode: 'string' }),
    carrier: text('carrier'),
    trackingNumber: text('tracking_number'),
    estimatedDeliveryAt: timestamp('estimated_delivery_at', { withTimezone: true, mode: 'string' }),
    /** The payment provider's charge for the order, refunds are made against it. */
    chargeId: text('charge_id').notNull(),
    refundedCents: bigint('refunded_cents', { mode: 'number' }).notNull().default(0),
    cancelledAt: timestamp('cancelled_at', { withTimezone: true, mode: 'string' }),
  });

  const refundLedger = schema.table('refund_ledger', {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    emailId: text('email_id').notNull(),
    runId: text('run_id').notNull(),
    /** The model's tool call that asked for it (with the run, what makes the refund unique). */
    toolCallId: text('tool_call_id').notNull(),
    orderId: text('order_id').notNull(),
    refundId: text('refund_id').notNull(),
    amountCents: bigint('amount_cents', { mode: 'number' }).notNull(),
    /** Who approved it, for a refund above the approval threshold; null below it. */
    approvedBy: text('approved_by'),
    /** The attempt that wrote it: fencing token, attempt number and worker. */
    fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
    attempt: integer('attempt').notNull(),
    workerId: text('worker_id').notNull(),
    writtenAt: timestamp('written_at', { withTimezone: true }).notNull().defaultNow(),
  });

  const outbox = schema.table('outbox', {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    emailId: text('email_id').notNull(),
    runId: text('run_id').notNull(),
    toAddress: text('to_address').notNull(),
    subject: text('subject').notNull(),
    body: text('body').notNull(),
    fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
    writtenAt: timestamp('written_at', { withTimezone: true }).notNull().defaultNow(),
  });

  const escalations = schema.table('escalations', {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    emailId: text('email_id').notNull(),
    runId: text('run_id').notNull(),
    reason: text('reason').notNull(),
    fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
    writtenAt: timestamp('written_at', { withTimezone: true }).notNull().defaultNow(),
  });

  const approvals = schema.table('approvals', {
    emailId: text('email_id').primaryKey(),
    runId: text('run_id').notNull(),
    orderId: text('order_id').notNull(),
    amountCents: bigint('amount_cents', { mode: 'number' }).notNull(),
    reason: text('reason').notNull(),
    status: text('status').$type<'pending' | 'approved' | 'rejected' | 'timed-out'>().notNull(),
    decidedBy: text('decided_by'),
    note: text('note'),
    requestedAt: timestamp('requested_at', { withTimezone: true }).notNull().defaultNow(),
    decidedAt: timestamp('decided_at', { withTimezone: true }),
  });

  /**
   * One row per step of an agent's loop (a model call or a tool call), keyed by the step's fencing scope (its run
   * and position, the same for every attempt of it): `executions` counts the attempts that committed it, so a step
   * run again after it had already committed shows as 2.
   */
  const agentSteps = schema.table('agent_steps', {
    scope: text('scope').primaryKey(),
    runId: text('run_id').notNull(),
    emailId: text('email_id').notNull(),
    tool: text('tool').notNull(),
    detail: jsonb('detail'),
    executions: integer('executions').notNull().default(1),
    fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull(),
    workerId: text('worker_id').notNull(),
    loggedAt: timestamp('logged_at', { withTimezone: true }).notNull().defaultNow(),
  });

  return { schemaName, orders, refundLedger, outbox, escalations, approvals, agentSteps };
}

export type SupportTables = ReturnType<typeof supportTables>;

/** The DDL of {@link supportTables}, idempotent (`IF NOT EXISTS`): run the statements in order. */
export function supportTablesDdl(schemaName: string): string[] {
  const s = quoteIdent(schemaName);
  return [
    `CREATE SCHEMA IF NOT EXISTS ${s}`,
    `CREATE TABLE IF NOT EXISTS ${s}.orders (
      order_id text PRIMARY KEY,
      customer_email text NOT NULL,
      customer_name text NOT NULL,
      item text NOT NULL,
      quantity integer NOT NULL CHECK (quantity > 0),
      total_cents bigint NOT NULL CHECK (total_cents > 0),
      currency char(3) NOT NULL,
      final_sale boolean NOT NULL,
      status text NOT NULL CHECK (status IN ('processing', 'shipped', 'delivered', 'cancelled')),
      ordered_at timestamptz NOT NULL,
      shipped_at timestamptz,
      delivered_at timestamptz,
      carrier text,
      tracking_number text,
      estimated_delivery_at timestamptz,
      charge_id text NOT NULL,
      refunded_cents bigint NOT NULL DEFAULT 0 CHECK (refunded_cents BETWEEN 0 AND total_cents),
      cancelled_at timestamptz
    )`,
    `CREATE TABLE IF NOT EXISTS ${s}.refund_ledger (
      id bigserial PRIMARY KEY,
      email_id text NOT NULL,
      run_id text NOT NULL,
      tool_call_id text NOT NULL,
      order_id text NOT NULL REFERENCES ${s}.orders (order_id),
      refund_id text NOT NULL,
      amount_cents bigint NOT NULL CHECK (amount_cents > 0),
      approved_by text,
      fencing_token bigint NOT NULL,
      attempt integer NOT NULL,
      worker_id text NOT NULL,
      written_at timestamptz NOT NULL DEFAULT now()
    )`,
    `CREATE INDEX IF NOT EXISTS refund_ledger_email ON ${s}.refund_ledger (email_id)`,
    `CREATE TABLE IF NOT EXISTS ${s}.outbox (
      id bigserial PRIMARY KEY,
      email_id text NOT NULL,
      run_id text NOT NULL,
      to_address text NOT NULL,
      subject text NOT NULL,
      body text NOT NULL,
      fencing_token bigint NOT NULL,
      written_at timestamptz NOT NULL DEFAULT now()
    )`,
    `CREATE INDEX IF NOT EXISTS outbox_email ON ${s}.outbox (email_id)`,
    `CREATE TABLE IF NOT EXISTS ${s}.escalations (
      id bigserial PRIMARY KEY,
      email_id text NOT NULL,
      run_id text NOT NULL,
      reason text NOT NULL,
      fencing_token bigint NOT NULL,
      written_at timestamptz NOT NULL DEFAULT now()
    )`,
    `CREATE TABLE IF NOT EXISTS ${s}.approvals (
      email_id text PRIMARY KEY,
      run_id text NOT NULL,
      order_id text NOT NULL REFERENCES ${s}.orders (order_id),
      amount_cents bigint NOT NULL CHECK (amount_cents > 0),
      reason text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'timed-out')),
      decided_by text,
      note text,
      requested_at timestamptz NOT NULL DEFAULT now(),
      decided_at timestamptz
    )`,
    `CREATE TABLE IF NOT EXISTS ${s}.agent_steps (
      scope text PRIMARY KEY,
      run_id text NOT NULL,
      email_id text NOT NULL,
      tool text NOT NULL,
      detail jsonb,
      executions integer NOT NULL DEFAULT 1,
      fencing_token bigint NOT NULL,
      worker_id text NOT NULL,
      logged_at timestamptz NOT NULL DEFAULT now()
    )`,
    `CREATE INDEX IF NOT EXISTS agent_steps_run ON ${s}.agent_steps (run_id)`,
  ];
}
