import { describe, expect, it } from 'vitest';
import type { AttemptDescription, EventDescription, RunDescription, StepDescription } from '../index.js';
import {
  detectTerminal,
  formatClock,
  formatDuration,
  paint,
  redactUrl,
  table,
  truncate,
  type Terminal,
} from './format.js';
import { formatRunsTable } from './runs-list.js';
import { formatRunTimeline, type RunTimeline } from './timeline.js';

const plain: Terminal = { color: false, width: 100 };
const widthOf = (line: string) => [...line].length;

describe('terminal detection', () => {
  it('uses colours only on a TTY, never under NO_COLOR, and caps the width at 100 columns', () => {
    expect(detectTerminal({ isTTY: false, columns: 300 }, {})).toEqual({ color: false, width: 100 });
    expect(detectTerminal({ isTTY: true, columns: 300 }, {})).toEqual({ color: true, width: 100 });
    expect(detectTerminal({ isTTY: true, columns: 72 }, { NO_COLOR: '1' })).toEqual({
      color: false,
      width: 72,
    });
    expect(paint(plain, 'red', 'failed')).toBe('failed');
    expect(paint({ color: true, width: 100 }, 'red', 'failed')).toBe('\u001b[31mfailed\u001b[39m');
  });
});

describe('text helpers', () => {
  it('cuts text at the end or in the middle, marking the cut', () => {
    expect(truncate('charge-the-card', 8)).toBe('charge-…');
    expect(truncate('host-name:4242:ab12cd34', 11, 'middle')).toBe('host-…2cd34');
    expect(truncate('short', 8)).toBe('short');
  });

  it('writes durations with their unit', () => {
    expect([850, 12_345, 245_000, 7_380_000, 273_600_000, null].map(formatDuration)).toEqual([
      '850ms',
      '12.3s',
      '4m05s',
      '2h03m',
      '3d04h',
      '—',
    ]);
  });

  it('shows the date of a timeline timestamp only when it differs from the reference day', () => {
    expect(formatClock('2025-06-01T12:00:01.250Z', '2025-06-01T11:59:00.000Z')).toBe('12:00:01.250');
    expect(formatClock('2025-06-02T00:00:01.250Z', '2025-06-01T11:59:00.000Z')).toBe(
      '2025-06-02 00:00:01.250',
    );
  });

  it('removes the password from a connection URL', () => {
    expect(redactUrl('postgres://app:s3cret@db:5432/prod')).toBe('postgres://app:***@db:5432/prod');
  });
});

describe('table', () => {
  it('narrows the widest shrinkable column to fit, and never the fixed ones', () => {
    const lines = table(
      { color: false, width: 40 },
      [
        { header: 'ID' },
        { header: 'WORKER', shrink: 'middle', minWidth: 8 },
        { header: 'N', align: 'right' },
      ],
      [['a1', 'a-very-long-worker-name:12345:abcdef12', '7'], { note: 'a note under the row' }],
    );
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^ID {2}WORKER {27} {2}N$/);
    expect(lines[1]).toBe('a1  a-very-long-work…e:12345:abcdef12  7');
    expect(lines[2]).toBe('    a note under the row');
    expect(lines.every((l) => widthOf(l) <= 40)).toBe(true);
  });
});

const run: RunDescription = {
  id: '7d1c2b9e-0c1f-4d53-9a55-2f7d0e7b6a10',
  kind: 'workflow',
  name: 'settle-invoices-for-a-very-long-customer-name',
  status: 'completed',
  input: { invoice: 'inv-1' },
  output: { ok: true },
  error: null,
  progress: null,
  parentRunId: null,
  scheduleId: null,
  scheduleTickAt: null,
  concurrency: null,
  idempotencyKey: 'batch-42',
  queue: 'default',
  priority: 0,
  cancelReason: null,
  createdAt: new Date('2025-06-01T12:00:00.000Z'),
  startAt: null,
  startedAt: new Date('2025-06-01T12:00:00.100Z'),
  finishedAt: new Date('2025-06-01T12:01:01.300Z'),
};

const step: Omit<StepDescription, 'attempts'> = {
  id: 'a0000000-0000-0000-0000-000000000001',
  seq: 0,
  kind: 'activity',
  name: 'charge',
  status: 'completed',
  attempt: 2,
  epoch: 2,
  token: '9000000000000057',
  output: {},
  error: null,
  nextRunAt: null,
  leaseExpiresAt: null,
  heartbeatDetails: null,
  retiredAt: null,
  concurrency: null,
  rateLimit: null,
};

const attempt = (over: Partial<AttemptDescription>): AttemptDescription => ({
  stepId: step.id,
  kind: 'activity',
  attempt: 1,
  epoch: 1,
  token: '9000000000000041',
  workerId: 'a-rather-long-host-name.internal.example.com:41234:ab12cd34',
  claimedAt: new Date('2025-06-01T12:00:00.200Z'),
  endedAt: new Date('2025-06-01T12:01:00.200Z'),
  outcome: 'lease_expired',
  durationMs: 60_000,
  ...over,
});

const staleEvent: EventDescription = {
  id: '9',
  stepId: step.id,
  type: 'attempt:stale-rejected',
  attempt: 1,
  epoch: 1,
  token: '9000000000000041',
  workerId: 'a-rather-long-host-name.internal.example.com:41234:ab12cd34',
  data: {
    operation: 'complete',
    staleToken: '9000000000000041',
    currentToken: '9000000000000057',
    reason: 'superseded',
  },
  at: new Date('2025-06-01T12:01:01.000Z'),
};

const timeline: RunTimeline = {
  run,
  steps: [
    {
      ...step,
      attempts: [
        attempt({}),
        attempt({
          attempt: 2,
          epoch: 2,
          token: '9000000000000057',
          workerId: 'w2',
          outcome: 'completed',
          durationMs: 12,
        }),
      ],
    },
  ],
  turns: [
    attempt({ stepId: null, kind: 'turn', token: '9000000000000040', outcome: 'completed', durationMs: 3 }),
  ],
  events: [staleEvent],
  signals: [],
  children: [],
  unclaimed: [],
};

describe('runs show timeline', () => {
  const lines = formatRunTimeline(plain, timeline, { nowIso: '2025-06-01T13:00:00.000Z', events: true });

  it('lists every attempt, turns included, in token order, within 100 columns', () => {
    const rows = lines.filter((l) => /^ {2}(turn|charge#0)\s/.test(l));
    expect(rows.map((r) => r.trim().split(/\s+/).slice(0, 4))).toEqual([
      ['turn', '1', '1', '9000000000000040'],
      ['charge#0', '1', '1', '9000000000000041'],
      ['charge#0', '2', '2', '9000000000000057'],
    ]);
    expect(rows[1]).toMatch(/a-rather-.*….*ab12cd34\s+lease_expired\s+12:00:00\.200\s+1m00s$/);
    for (const line of lines) expect(widthOf(line), line).toBeLessThanOrEqual(100);
  });

  it('names the stale and the current token of every rejected write', () => {
    const at = lines.indexOf('REJECTED STALE WRITES (1)');
    expect(lines.slice(at + 1, at + 3)).toEqual([
      '  12:01:01.000  charge#0  complete rejected (superseded)',
      '                          stale token 9000000000000041 · current token 9000000000000057 · epoch 1 ·…',
    ]);
    expect(lines.find((l) => l.includes('attempt:stale-rejected'))).toBe(
      '  12:01:01.000  attempt:stale-rejected  charge#0  stale 9000000000000041 → current 9000000000000057…',
    );
  });
});

describe('runs list table', () => {
  it('prints the full run id, the name and the idempotency key within 100 columns', () => {
    const keyed: RunDescription = { ...run, name: 'settle', idempotencyKey: 'inv-1' };
    const keyless: RunDescription = {
      ...keyed,
      id: '7d1c2b9e-0c1f-4d53-9a55-2f7d0e7b6a11',
      idempotencyKey: null,
    };
    const lines = formatRunsTable(plain, [keyed, keyless], '2025-06-01T13:00:00.000Z');
    expect(lines[0]).toMatch(/^RUN ID +STATUS +KIND +NAME +KEY +CREATED \(UTC\) +DURATION$/);
    expect(lines[1]).toMatch(
      /^7d1c2b9e-0c1f-4d53-9a55-2f7d0e7b6a10 {2}completed {2}wf {4}settle {2}inv-1 {2}2025-06-01 12:00:00 +1m01s$/,
    );
    expect(lines[2]).toMatch(/ settle {2}— +2025-06-01/);
    for (const line of lines) expect(widthOf(line)).toBeLessThanOrEqual(100);
  });

  it('never cuts a name: it cuts the key in the middle, and a line that still cannot fit stays long', () => {
    const keyed: RunDescription = { ...run, name: 'settle', idempotencyKey: `order-${'7'.repeat(80)}-end` };
    expect(formatRunsTable(plain, [keyed], '2025-06-01T13:00:00.000Z')[1]).toMatch(
      / settle {2}ord…nd {2}2025-/,
    );
    const long = formatRunsTable(plain, [run], '2025-06-01T13:00:00.000Z');
    expect(long[1]).toMatch(/ settle-invoices-for-a-very-long-customer-name {2}bat…42 {2}2025-/);
  });

  it('prints a key that its column cut whole on the line under its run, wrapped, and a key that fits once', () => {
    const key = `order-${'7'.repeat(100)}-end`;
    const cut: RunDescription = { ...run, name: 'settle', idempotencyKey: key };
    const fits: RunDescription = {
      ...cut,
      id: '7d1c2b9e-0c1f-4d53-9a55-2f7d0e7b6a11',
      idempotencyKey: 'inv-1',
    };
    const lines = formatRunsTable(plain, [cut, { ...cut, idempotencyKey: 'charge-INV-2026-00005' }], 'x');
    expect(lines.slice(2)).toEqual([
      `    key ${key.slice(0, 92)}`,
      `        ${key.slice(92)}`,
      expect.stringMatching(/ settle {2}cha…05 {2}2025-/) as string,
      '    key charge-INV-2026-00005',
    ]);
    for (const line of lines) expect(widthOf(line)).toBeLessThanOrEqual(100);
    expect(formatRunsTable(plain, [fits], 'x')).toHaveLength(2);
  });
});

describe('runs show of a long run', () => {
  const failed: RunDescription = {
    ...run,
    status: 'failed',
    error: {
      type: 'ApplicationFailure',
      message: `the ledger refused the batch: ${'line item rejected; '.repeat(12)}see ticket OPS-4711 for the cause`,
      nonRetryable: true,
    },
  };
  const steps = Array.from({ length: 240 }, (_, k) => ({
    ...step,
    id: `a0000000-0000-0000-0000-${String(k).padStart(12, '0')}`,
    seq: k,
    attempts: [
      attempt({
        stepId: `a0000000-0000-0000-0000-${String(k).padStart(12, '0')}`,
        token: String(1000 + k),
        outcome: 'completed',
      }),
    ],
  }));
  const events: EventDescription[] = steps.flatMap((s) =>
    ['attempt:claimed', 'attempt:completed'].map((type, i) => ({
      ...staleEvent,
      id: `${s.seq}-${i}`,
      stepId: s.id,
      type,
      token: s.attempts[0]?.token ?? null,
      data: {},
    })),
  );
  const long: RunTimeline = { ...timeline, run: failed, steps, turns: [], events };

  it('prints the run error whole, wrapped to the width', () => {
    const lines = formatRunTimeline(plain, long, { nowIso: '2025-06-01T13:00:00.000Z', events: false });
    const at = lines.findIndex((l) => l.startsWith('error'));
    const errorLines = lines.slice(
      at,
      lines.findIndex((l, i) => i > at && !l.startsWith(' '.repeat(10))),
    );
    const text = errorLines.map((l, i) => (i === 0 ? l.slice(10) : l.trim())).join(' ');
    expect(text).toBe(
      `ApplicationFailure: the ledger refused the batch: ${'line item rejected; '.repeat(12)}see ticket OPS-4711 for the cause`,
    );
    expect(errorLines.length).toBeGreaterThan(1);
    for (const line of lines) expect(widthOf(line), line).toBeLessThanOrEqual(100);
  });

  it('shows the first and last attempts and events of a 240-step run and says how many it left out', () => {
    const lines = formatRunTimeline(plain, long, { nowIso: '2025-06-01T13:00:00.000Z', events: true });
    expect(lines.length).toBeLessThan(120);
    expect(lines).toContain('      … 210 more attempts (use --all to show every one)');
    expect(lines).toContain('  … 450 more events (use --all to show every one)');
    expect(lines.some((l) => /^ {2}charge#239 /.test(l))).toBe(true);
    expect(lines.some((l) => /^ {2}charge#0 /.test(l))).toBe(true);
    expect(lines.some((l) => /^ {2}charge#100 /.test(l))).toBe(false);

    const every = formatRunTimeline(plain, long, {
      nowIso: '2025-06-01T13:00:00.000Z',
      events: true,
      all: true,
    });
    expect(every.filter((l) => /^ {2}charge#\d+ /.test(l))).toHaveLength(240);
    expect(every.some((l) => l.includes('more attempts'))).toBe(false);
  });
});

describe('runs show of work no worker claimed', () => {
  it('says which activity on which queue has waited, and asks whether a worker serves it', () => {
    const waiting: RunTimeline = {
      ...timeline,
      unclaimed: [{ kind: 'activity', name: 'refund', queue: 'payments', stepId: null, dueForMs: 95_000 }],
    };
    const lines = formatRunTimeline(plain, waiting, { nowIso: '2025-06-01T13:00:00.000Z', events: false });
    const line = lines.find((l) => l.startsWith('waiting'));
    expect(line).toContain('activity refund on queue payments due for');
    expect(line).toContain('never claimed: is a worker serving it?');
  });
});

describe('runs show of a run under flow control', () => {
  it('names the concurrency key and the rate limit the run waits under', () => {
    const limited: RunTimeline = {
      ...timeline,
      steps: timeline.steps.map((s) => ({
        ...s,
        concurrency: { key: 'customer-7', limit: 1 },
        rateLimit: { key: '', limit: 10, periodMs: 1_000 },
      })),
    };
    const lines = formatRunTimeline(plain, limited, { nowIso: '2025-06-01T13:00:00.000Z', events: false });
    const line = lines.find((l) => l.startsWith('limits'));
    expect(line).toContain('concurrency key "customer-7" (limit 1)');
    expect(line).toContain('rate key "" (10 per 1');
    expect(
      formatRunTimeline(plain, timeline, { nowIso: '2025-06-01T13:00:00.000Z', events: false }),
    ).not.toEqual(expect.arrayContaining([expect.stringMatching(/^limits/)]));
  });

  it('says when a delayed run starts', () => {
    const delayed = formatRunTimeline(
      plain,
      { ...timeline, run: { ...timeline.run, startAt: new Date('2025-06-01T14:00:00.000Z') } },
      { nowIso: '2025-06-01T13:00:00.000Z', events: false },
    );
    expect(delayed.find((l) => l.startsWith('starts'))).toContain('14:00:00.000 UTC (a delayed start)');
  });
});
