import { describe, expect, it } from 'vitest';
import {
  SUPPORT_AGENT_DEMO,
  runSupportAgentDemo,
  type SupportAgentDemoResult,
} from '@palisade/examples/support-agent';
import { useTestDatabase } from '../support/postgres.js';

/** Every check the demo prints, in order: each must be there and pass. */
const CHECKS = [
  'every email is answered or escalated',
  'one refund per approved email',
  'no refund above the threshold without approval',
  'one ledger row per refund at the provider',
  "the killed worker's run resumed without repeating a tool call",
  "the zombie's refund write was rejected",
  'approvals waited with no lease held',
  'the unanswered approval timed out after two days and escalated',
  'watch() streamed the progress of a run',
];

/** A PGlite boot plus 112 agent loops with a killed worker and a stalled one on a busy 2-core machine. */
const DEMO_TIMEOUT_MS = 300_000;

async function runDemo(databaseUrl?: string): Promise<{ result: SupportAgentDemoResult; printed: string[] }> {
  const printed: string[] = [];
  const result = await runSupportAgentDemo({
    ...(databaseUrl ? { databaseUrl } : {}),
    log: (line) => printed.push(line),
  });
  return { result, printed };
}

/** The demo's own checks, plus the numbers and the decisions behind them. */
function expectHandledInbox({
  result,
  printed,
}: {
  result: SupportAgentDemoResult;
  printed: string[];
}): void {
  const failed = result.checks.filter((c) => !c.ok);
  expect(failed, `failed checks; the demo printed:\n${printed.join('\n')}`).toEqual([]);
  expect(result.checks.map((c) => c.name)).toEqual(CHECKS);
  expect(result.ok).toBe(true);
  for (const c of result.checks) expect(printed).toContain(`  ✓ ${c.name} — ${c.detail}`);

  expect(result.counts.emails).toBe(112);
  expect(result.counts.answered + result.counts.escalated).toBe(112);
  expect(result.outcomes.size).toBe(112);
  // Eight refunds above $250: six approved, one rejected, one left to time out.
  expect(result.counts.approvalsRequested).toBe(8);
  const approved = result.decisions.filter((d) => d.approved).map((d) => d.emailId);
  const rejected = result.decisions.filter((d) => !d.approved).map((d) => d.emailId);
  expect(approved).toHaveLength(6);
  expect(rejected).toEqual([SUPPORT_AGENT_DEMO.rejectedEmail]);
  for (const id of approved)
    expect(result.outcomes.get(id)).toMatchObject({ approval: 'approved', refund: { status: 'refunded' } });
  expect(result.outcomes.get(SUPPORT_AGENT_DEMO.rejectedEmail)).toMatchObject({
    approval: 'rejected',
    refund: { status: 'rejected' },
  });
  expect(result.outcomes.get(SUPPORT_AGENT_DEMO.timedOutEmail)).toMatchObject({
    approval: 'timed-out',
    outcome: 'escalated',
  });
  // On PostgreSQL every decision went through the `palisade` CLI as a child process; on the embedded database,
  // which serves one process, in process, with the same command printed.
  const via = result.database === 'postgres' ? 'palisade CLI' : 'client.signal';
  expect(result.decisions.every((d) => d.via === via)).toBe(true);
  for (const d of result.decisions) {
    expect(d.command).toMatch(
      /^npx -y pnpm@12\.4\.2 palisade (--schema \S+ )?runs signal [0-9a-f-]{36} support-agent\.refund-approval '\{"approved":(true|false),/,
    );
    if (via === 'palisade CLI')
      expect(d.output).toMatch(/^signal support-agent\.refund-approval sent to run [0-9a-f-]{36} \(#\d+\)$/);
  }

  const killed = SUPPORT_AGENT_DEMO.killed;
  expect(printed.some((l) => l.includes(`is KILLED as it starts ${killed.tool} for ${killed.emailId}`))).toBe(
    true,
  );
  expect(
    printed.some((l) => l.includes(`fenced refund write for ${SUPPORT_AGENT_DEMO.zombieEmail} REFUSED`)),
  ).toBe(true);
  expect(printed.some((l) => /watch +EM-0002 step \d+: tool check_refund_policy/.test(l))).toBe(true);
  expect(printed.some((l) => l.includes('TIME TRAVEL'))).toBe(true);
}

describe('support-agent example', () => {
  describe('on real PostgreSQL', () => {
    const databaseUrl = useTestDatabase('support_agent');

    it(
      'answers or escalates every email, refunds once per approval, and survives a killed worker and a zombie',
      async () => {
        expectHandledInbox(await runDemo(databaseUrl()));
      },
      DEMO_TIMEOUT_MS,
    );
  });

  describe('on the embedded database (PGlite)', () => {
    it(
      'answers or escalates every email, refunds once per approval, and survives a killed worker and a zombie',
      async () => {
        expectHandledInbox(await runDemo());
      },
      DEMO_TIMEOUT_MS,
    );
  });
});
