import type { RunDetails } from '@palisade/engine';
import type { DemoCheck } from '../invoice-settlement/checks.js';
import type { Refund } from '../invoice-settlement/payment-provider.js';
import type { StallRecord } from '../invoice-settlement/stall-fault.js';
import type { CustomerEmail } from './inbox.js';
import type { KillRecord } from './worker-kill.js';
import type { EmailOutcome } from './workflow.js';

/** A refund ledger row as read back. */
export interface LedgerRow {
  readonly emailId: string;
  readonly runId: string;
  readonly toolCallId: string;
  readonly orderId: string;
  readonly refundId: string;
  readonly amountCents: number;
  readonly approvedBy: string | null;
  readonly fencingToken: bigint;
}

/** What the demo saw of one approval run while it waited for its signal. */
export interface WaitSnapshot {
  readonly emailId: string;
  readonly runId: string;
  /** The wait is a signal step that was never claimed, no step is running and no turn is open. */
  readonly noLeaseHeld: boolean;
  readonly detail: string;
}

/** An event `handle.watch()` yielded, as far as the checks read it. */
export interface SeenEvent {
  readonly type: string;
  readonly data: unknown;
}

export interface SupportVerifyInput {
  readonly emails: readonly CustomerEmail[];
  /** By email id: its run and what the run returned (undefined if it did not complete). */
  readonly runs: ReadonlyMap<string, { readonly runId: string; readonly outcome: EmailOutcome | undefined }>;
  readonly outbox: readonly { readonly emailId: string; readonly runId: string }[];
  readonly escalations: readonly {
    readonly emailId: string;
    readonly runId: string;
    readonly reason: string;
  }[];
  readonly approvals: readonly {
    readonly emailId: string;
    readonly status: string;
    readonly decidedBy: string | null;
    readonly amountCents: number;
  }[];
  readonly ledger: readonly LedgerRow[];
  /** The provider's refunds for this inbox's runs. */
  readonly refunds: readonly Refund[];
  /** The orders' refunded amounts as stored. */
  readonly orders: readonly { readonly orderId: string; readonly refundedCents: number }[];
  readonly approvalThresholdCents: number;
  /** What the demo decided for each approval: by email id. */
  readonly decisions: ReadonlyMap<string, 'approved' | 'rejected' | 'timed-out'>;
  readonly kill: {
    readonly record: KillRecord | undefined;
    readonly description: RunDetails | undefined;
    /** The run's rows of `agent_steps`. */
    readonly steps: readonly { readonly scope: string; readonly tool: string; readonly executions: number }[];
  };
  readonly zombie: {
    readonly record: StallRecord | undefined;
    readonly description: RunDetails | undefined;
  };
  readonly waits: readonly WaitSnapshot[];
  readonly timeout: {
    readonly emailId: string;
    readonly description: RunDetails | undefined;
    /** How far the database clock was moved forward (ms). */
    readonly advancedMs: number;
  };
  readonly watch: { readonly emailId: string; readonly events: readonly SeenEvent[] };
}

function check(name: string, ok: boolean, detail: string): DemoCheck {
  return { name, ok, detail };
}

function countBy<T>(items: readonly T[], key: (item: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
}

const list = (ids: readonly string[]): string =>
  ids.length > 6 ? `${ids.slice(0, 6).join(', ')}, …` : ids.join(', ');

/** Check the inbox's outcome against the outbox, the ledger, the provider, the approvals and the engine's history. */
export function verifySupportAgent(input: SupportVerifyInput): DemoCheck[] {
  const checks: DemoCheck[] = [];
  const { emails, runs } = input;
  const runIds = new Set([...runs.values()].map((r) => r.runId));
  const ofRun = <T extends { runId: string }>(rows: readonly T[]): T[] =>
    rows.filter((r) => runIds.has(r.runId));

  // 1. Every email got exactly one reply; the escalated ones also a ticket, and only they.
  const replies = countBy(ofRun(input.outbox), (r) => r.emailId);
  const tickets = countBy(ofRun(input.escalations), (r) => r.emailId);
  const notHandled = emails.filter((e) => {
    const outcome = runs.get(e.id)?.outcome;
    return (
      outcome === undefined ||
      replies.get(e.id) !== 1 ||
      (outcome.outcome === 'escalated') !== (tickets.get(e.id) === 1) ||
      (tickets.get(e.id) ?? 0) > 1
    );
  });
  const escalated = emails.filter((e) => runs.get(e.id)?.outcome?.outcome === 'escalated').length;
  checks.push(
    check(
      'every email is answered or escalated',
      notHandled.length === 0,
      `${emails.length} emails: ${emails.length - escalated - notHandled.length} answered, ${escalated} escalated ` +
        `(each with one ticket), one reply each in the outbox` +
        (notHandled.length ? `; NOT: ${list(notHandled.map((e) => e.id))}` : ''),
    ),
  );

  // 2. One refund per approved email, with the approver on its ledger row.
  const ledgerByEmail = new Map<string, LedgerRow[]>();
  for (const l of ofRun(input.ledger))
    ledgerByEmail.set(l.emailId, [...(ledgerByEmail.get(l.emailId) ?? []), l]);
  const approved = [...input.decisions].filter(([, d]) => d === 'approved').map(([id]) => id);
  const approvalOf = new Map(input.approvals.map((a) => [a.emailId, a]));
  const badApproved = approved.filter((id) => {
    const rows = ledgerByEmail.get(id) ?? [];
    const a = approvalOf.get(id);
    return (
      rows.length !== 1 ||
      a?.status !== 'approved' ||
      rows[0]?.approvedBy !== a.decidedBy ||
      rows[0]?.amountCents !== a.amountCents
    );
  });
  checks.push(
    check(
      'one refund per approved email',
      approved.length > 0 && badApproved.length === 0,
      `${approved.length} approved, ${approved.length - badApproved.length} refunded once each, with the approver on ` +
        `the ledger row` +
        (badApproved.length ? `; WRONG: ${list(badApproved)}` : ''),
    ),
  );

  // 3. No refund above the threshold without an approval; none at all for a rejected or timed-out one.
  const overThreshold = ofRun(input.ledger).filter((l) => l.amountCents > input.approvalThresholdCents);
  const unapproved = overThreshold.filter(
    (l) => approvalOf.get(l.emailId)?.status !== 'approved' || input.decisions.get(l.emailId) !== 'approved',
  );
  const notApproved = [...input.decisions].filter(([, d]) => d !== 'approved').map(([id]) => id);
  const refundedAnyway = notApproved.filter((id) => (ledgerByEmail.get(id)?.length ?? 0) > 0);
  const providerOver = input.refunds.filter((r) => r.amountMinor > input.approvalThresholdCents).length;
  checks.push(
    check(
      'no refund above the threshold without approval',
      unapproved.length === 0 && refundedAnyway.length === 0 && providerOver === overThreshold.length,
      `${overThreshold.length} refunds above $${(input.approvalThresholdCents / 100).toFixed(2)} at the provider and in ` +
        `the ledger, each approved; ${notApproved.length} not approved (${list(notApproved)}), none refunded` +
        (unapproved.length || refundedAnyway.length
          ? `; UNAPPROVED: ${list([...unapproved.map((l) => l.emailId), ...refundedAnyway])}`
          : ''),
    ),
  );

  // 4. The ledger and the provider agree, refund for refund, and with the orders' refunded amounts.
  const refundById = new Map(input.refunds.map((r) => [r.id, r]));
  const ledgerRows = ofRun(input.ledger);
  const perCall = countBy(ledgerRows, (l) => `${l.runId}/${l.toolCallId}`);
  const duplicates = [...perCall].filter(([, n]) => n > 1).map(([k]) => k);
  const mismatched = ledgerRows.filter((l) => refundById.get(l.refundId)?.amountMinor !== l.amountCents);
  const refundedPerOrder = new Map<string, number>();
  for (const l of ledgerRows)
    refundedPerOrder.set(l.orderId, (refundedPerOrder.get(l.orderId) ?? 0) + l.amountCents);
  const ordersOff = input.orders.filter((o) => o.refundedCents !== (refundedPerOrder.get(o.orderId) ?? 0));
  const total = ledgerRows.reduce((n, l) => n + l.amountCents, 0);
  checks.push(
    check(
      'one ledger row per refund at the provider',
      input.refunds.length === ledgerRows.length &&
        duplicates.length === 0 &&
        mismatched.length === 0 &&
        ordersOff.length === 0,
      `${input.refunds.length} refunds at the provider, ${ledgerRows.length} ledger rows, $${(total / 100).toFixed(2)} in all; ` +
        `orders' refunded amounts match` +
        (duplicates.length ? `; DUPLICATES: ${list(duplicates)}` : '') +
        (mismatched.length ? `; MISMATCHED: ${list(mismatched.map((l) => l.emailId))}` : '') +
        (ordersOff.length ? `; ORDERS OFF: ${list(ordersOff.map((o) => o.orderId))}` : ''),
    ),
  );

  checks.push(killCheck(input));
  checks.push(zombieCheck(input));

  // 7. While they waited for a person, the approvals held no lease: nothing claimed, no turn open.
  const held = input.waits.filter((w) => !w.noLeaseHeld);
  checks.push(
    check(
      'approvals waited with no lease held',
      input.waits.length > 0 && held.length === 0,
      `${input.waits.length} runs waited for approval: each wait a signal step never claimed (no token, no lease), no ` +
        `step running, every turn ended` +
        (held.length ? `; HELD: ${held.map((w) => `${w.emailId} (${w.detail})`).join('; ')}` : ''),
    ),
  );

  // 8. The approval nobody answered timed out after two days of database time, and escalated the email.
  const t = input.timeout;
  const timedOutEvent = t.description?.events.find((e) => e.type === 'signal:timed-out');
  const tRun = runs.get(t.emailId)?.outcome;
  const tTicket = ofRun(input.escalations).find((e) => e.emailId === t.emailId);
  checks.push(
    check(
      'the unanswered approval timed out after two days and escalated',
      timedOutEvent !== undefined &&
        t.advancedMs >= 2 * 86_400_000 &&
        tRun?.approval === 'timed-out' &&
        tRun.outcome === 'escalated' &&
        tTicket !== undefined &&
        (ledgerByEmail.get(t.emailId)?.length ?? 0) === 0 &&
        approvalOf.get(t.emailId)?.status === 'timed-out',
      `${t.emailId}: database clock moved ${(t.advancedMs / 86_400_000).toFixed(2)} days; ` +
        `${timedOutEvent ? 'signal:timed-out recorded' : 'NO signal:timed-out'}; ${tTicket ? `escalated (${tTicket.reason})` : 'NOT escalated'}; no refund`,
    ),
  );

  // 9. `handle.watch()` streamed the run's progress as it went, in order, to its end.
  const w = input.watch;
  const progress = w.events.filter((e) => e.type === 'run:progress');
  const phases = progress.map((e) => (e.data as { value?: { phase?: string } } | null)?.value?.phase);
  const ended = w.events.at(-1)?.type === 'run:completed';
  checks.push(
    check(
      'watch() streamed the progress of a run',
      progress.length >= 3 && phases.includes('tool') && phases.at(-1) === 'done' && ended,
      `${w.emailId}: ${w.events.length} events, ${progress.length} progress updates (${[...new Set(phases)].join(' → ')}), ` +
        `ending with ${w.events.at(-1)?.type ?? 'nothing'}`,
    ),
  );
  return checks;
}

/**
 * The killed worker's run resumed elsewhere: the interrupted step was finished by another worker under a newer
 * token, no step that had completed before the kill was claimed again after it, and no step from the interrupted
 * one on was committed twice (its fenced log row counts the attempts that committed it).
 */
function killCheck(input: SupportVerifyInput): DemoCheck {
  const { record, description, steps } = input.kill;
  const name = "the killed worker's run resumed without repeating a tool call";
  if (!record || !description) return check(name, false, 'no worker was killed');
  const activitySteps = description.steps.filter((s) => s.kind === 'activity');
  const killedStep = activitySteps.find((s) => s.id === record.stepId);
  const killedAttempt = killedStep?.attempts.find((a) => a.token === record.token.toString());
  const winner = killedStep?.attempts.find((a) => a.outcome === 'completed');
  if (!killedStep || !killedAttempt)
    return check(name, false, `the killed step of ${record.emailId} is not in its history`);
  const killedAt = killedAttempt.claimedAt.getTime();
  const before = activitySteps.filter((s) => s.seq < killedStep.seq);
  const againAfterKill = before.filter((s) => s.attempts.some((a) => a.claimedAt.getTime() > killedAt));
  const seqOf = (scope: string): number => Number(/\/seq:(\d+)$/.exec(scope)?.[1] ?? -1);
  const committedTwice = steps.filter((s) => seqOf(s.scope) >= killedStep.seq && s.executions !== 1);
  const earlierRetries = before.filter((s) => s.attempts.length > 1).length;
  const ok =
    description.run.status === 'completed' &&
    winner !== undefined &&
    winner.workerId !== record.workerId &&
    BigInt(winner.token) > record.token &&
    activitySteps.every((s) => s.status === 'completed') &&
    againAfterKill.length === 0 &&
    committedTwice.length === 0 &&
    steps.length === activitySteps.length;
  return check(
    name,
    ok,
    `${record.emailId}: ${record.workerId} killed at ${record.tool} (token ${record.token}); ` +
      `${winner ? `${winner.workerId} finished it (epoch ${winner.epoch}, token ${winner.token})` : 'NOT finished'}; ` +
      `none of the ${before.length} steps done before the kill ran again${againAfterKill.length ? ` (BUT: ${againAfterKill.map((s) => s.name).join(', ')})` : ''}` +
      `${earlierRetries ? ` (${earlierRetries} had been retried before it, a lease lost under load)` : ''}; ` +
      `${steps.length} steps logged for ${activitySteps.length} recorded, none from the kill on committed twice` +
      (committedTwice.length ? ` (BUT: ${committedTwice.map((s) => s.tool).join(', ')})` : ''),
  );
}

/** The stalled refund's late write was refused, and the refund happened once. */
function zombieCheck(input: SupportVerifyInput): DemoCheck {
  const { record, description } = input.zombie;
  const name = "the zombie's refund write was rejected";
  if (!record) return check(name, false, 'no refund stalled');
  const staleRows = input.ledger.filter((l) => l.fencingToken === record.staleToken);
  const rows = input.ledger.filter((l) => l.emailId === record.invoiceNumber && runIdsOf(input).has(l.runId));
  const refund = input.refunds.find((r) => r.id === rows[0]?.refundId);
  const attempts = description?.steps.find((s) => s.id === record.stepId)?.attempts ?? [];
  const winner = attempts.find((a) => a.outcome === 'completed');
  const ok =
    record.outcome === 'refused' &&
    staleRows.length === 0 &&
    rows.length === 1 &&
    winner !== undefined &&
    BigInt(winner.token) > record.staleToken &&
    rows[0]?.fencingToken === BigInt(winner.token) &&
    (refund?.requestCount ?? 0) >= 2;
  const error = record.error as { code?: unknown } | undefined;
  return check(
    name,
    ok,
    `${record.invoiceNumber}: ${record.staleWorker}'s write with token ${record.staleToken} ${record.outcome ?? 'never came'}` +
      `${typeof error?.code === 'string' ? ` (${error.code})` : ''}; ${winner ? `${winner.workerId} (token ${winner.token}) wrote the one ledger row` : 'no attempt completed'}; ` +
      `the provider saw the key ${refund?.requestCount ?? 0} times and refunded once`,
  );
}

function runIdsOf(input: SupportVerifyInput): Set<string> {
  return new Set([...input.runs.values()].map((r) => r.runId));
}
