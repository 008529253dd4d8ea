import { createHash } from 'node:crypto';
import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import { describe, expect, it } from 'vitest';
import type { Database } from '../../db/database.js';
import { renderSql } from '../../db/render-sql.js';
import type { Delivery, NewStep, RejectedSignal, TurnOutcome } from '../../turn/contract.js';
import {
  commitFusedTurn,
  commitTurn,
  type EagerDispatch,
  type FusedTurnRef,
  type TurnRecord,
  type TurnRef,
} from '../commit-turn.js';
import { schemaNames } from '../schema-names.js';

/*
 * The SQL of a turn's commit, pinned. commitTurn and commitFusedTurn send one statement whose text depends on nine
 * switches (the grant, the run's end, progress, signals taken, waits completed by position, signals refused,
 * children started, children with keys, flow-control keys); this test renders it, with its parameters, as the
 * engine sends it (renderSql, checked against drizzle's own rendering; no database), for the turns the callers make:
 * - `__snapshots__/<scenario>.sql`: one readable file per named scenario below (what a reviewer reads);
 * - `__snapshots__/combinations.txt`: every combination of switches that can occur (see `combinations`), each with
 *   the digest of its text and parameters (what proves a refactor changed nothing: a full text per combination
 *   would be ~170 files of ~600 lines each).
 */

const n = schemaNames('palisade');
const dialect = new PgDialect();

const RUN_ID = '00000000-0000-4000-8000-000000000001';
const STEP_A = '00000000-0000-4000-8000-00000000000a';
const STEP_B = '00000000-0000-4000-8000-00000000000b';
const STEP_W = '00000000-0000-4000-8000-00000000000c';
const CHILD_RUN_ID = '00000000-0000-4000-8000-0000000000c1';
const NONCE = '00000000-0000-4000-8000-0000000000ee';

const retryPolicy = {
  initialIntervalMs: 1000,
  backoffCoefficient: 2,
  maximumIntervalMs: 100_000,
  maximumAttempts: 10,
  nonRetryableErrorTypes: [],
  jitter: 0.2,
};

const ref: TurnRef = {
  runId: RUN_ID,
  workflowName: 'order',
  token: 41n,
  nonce: NONCE,
  attempt: 1,
  wakeCount: 3,
  cancelRequested: false,
  leaseMs: 30_000,
  nowMs: 1_780_000_000_000.25,
};

const fusedRef: FusedTurnRef = {
  runId: RUN_ID,
  workflowName: 'order',
  workerId: 'worker-1',
  turnEpoch: 2,
  turnAttempt: 2,
  wakeCount: 3,
  nowMs: 1_780_000_000_000.25,
  completion: { stepId: STEP_A, token: 57n, nonce: NONCE, output: { charged: true } },
};

const dispatch: EagerDispatch = {
  workerId: 'worker-1',
  activityNames: ['charge'],
  queues: ['default'],
  limit: 4,
};

function activity(seq: number, extra: Partial<Extract<NewStep, { kind: 'activity' }>> = {}): NewStep {
  return {
    seq,
    kind: 'activity',
    name: 'charge',
    input: { amountCents: 100 },
    queue: 'default',
    priority: 0,
    retryPolicy,
    leaseMs: 30_000,
    startToCloseTimeoutMs: 300_000,
    afterDeliveredSeq: 1,
    ...extra,
  };
}

const timer: NewStep = { seq: 3, kind: 'timer', name: 'sleep', delayMs: 60_000, afterDeliveredSeq: 1 };
const value: NewStep = {
  seq: 4,
  kind: 'value',
  name: 'now',
  output: 1_780_000_000_000,
  afterDeliveredSeq: 1,
};
const signalWaitTaking: NewStep = {
  seq: 5,
  kind: 'signal',
  name: 'approve',
  timeoutMs: 3_600_000,
  signalId: '7',
  deliveredSeq: 2,
  afterDeliveredSeq: 1,
};
function child(key: string | null): NewStep {
  return {
    seq: 6,
    kind: 'child',
    name: 'ship',
    childRunId: CHILD_RUN_ID,
    input: { orderId: 'o-1' },
    key,
    queue: 'default',
    priority: 0,
    cancellation: 'cascade',
    afterDeliveredSeq: 1,
  };
}
const delivered: Delivery = { stepId: STEP_B, seq: 1, deliveredSeq: 1, firesTimer: false };
const timerFired: Delivery = { stepId: STEP_W, seq: 0, deliveredSeq: 1, firesTimer: true };
const byPosition: Delivery = { stepId: null, seq: 2, deliveredSeq: 3, firesTimer: false, signalId: '8' };
const refused: RejectedSignal = { signalId: '9', seq: 2, message: 'expected number, received string' };

const failure = { type: 'Error', message: 'boom', nonRetryable: true };
const outcomes = {
  blocked: { kind: 'blocked' },
  completed: { kind: 'completed', output: { orderId: 'o-1' } },
  failed: { kind: 'failed', error: failure },
  cancelled: {
    kind: 'cancelled',
    error: { type: 'CancelledFailure', message: 'cancelled', nonRetryable: true },
  },
} satisfies Record<string, TurnOutcome>;
type End = keyof typeof outcomes;

/** A database that records the statements it is sent and answers each turn commit as applied. */
function recordingDatabase(): { db: Database; sent: SQL[] } {
  const sent: SQL[] = [];
  const db = {
    rows: (query: SQL) => {
      sent.push(query);
      return Promise.resolve([
        {
          fenced: true,
          conflict: false,
          eager_steps: null,
          ended: null,
          turn: { epoch: 3, attempt: 3, token: '60' },
          cascade_children: null,
        },
      ]);
    },
  } as unknown as Database;
  return { db, sent };
}

interface Scenario {
  readonly grant: 'claimed' | 'fused';
  readonly record: TurnRecord;
  readonly ref?: TurnRef;
  readonly dispatch?: EagerDispatch;
}

/** The statement a scenario sends, rendered: its text, then its parameters, one a line. */
async function render(s: Scenario): Promise<string> {
  const { db, sent } = recordingDatabase();
  if (s.grant === 'claimed') await commitTurn(db, n, s.ref ?? ref, s.record, s.dispatch);
  else await commitFusedTurn(db, n, fusedRef, s.record, s.dispatch);
  expect(sent).toHaveLength(1);
  const query = renderSql(sent[0] as SQL);
  // The engine's renderer writes exactly what drizzle's does.
  const drizzle = dialect.sqlToQuery(sent[0] as SQL);
  expect(query).toEqual({ sql: drizzle.sql, params: drizzle.params });
  const params = query.params.map((p, i) => `-- $${i + 1} = ${JSON.stringify(p)}`).join('\n');
  return `${query.sql}\n\n-- parameters\n${params}\n`;
}

/**
 * Named turns, each a path the callers take (turn-loop.ts: a claimed turn's commit, its unstorable fallback, a
 * fused step's commit), as a reviewer would ask to see them.
 */
const scenarios: Record<string, { why: string } & Scenario> = {
  'claimed-blocked': {
    why: 'the common turn: an outcome delivered, an activity, a timer and a recorded value scheduled',
    grant: 'claimed',
    record: { newSteps: [activity(2), timer, value], deliveries: [delivered], outcome: outcomes.blocked },
  },
  'claimed-blocked-eager': {
    why: 'a turn that schedules activities this worker serves: turn-loop passes its dispatch reservation',
    grant: 'claimed',
    dispatch,
    record: { newSteps: [activity(2)], deliveries: [delivered], outcome: outcomes.blocked },
  },
  'claimed-blocked-timer-fired': {
    why: 'a turn woken by a timer it saw fire, that schedules nothing new',
    grant: 'claimed',
    record: { newSteps: [], deliveries: [timerFired], outcome: outcomes.blocked },
  },
  'claimed-blocked-cancel-unseen': {
    why: 'a cancel requested before the turn: the steps it blocks on are recorded cancelled, compensation scheduled',
    grant: 'claimed',
    ref: { ...ref, cancelRequested: true },
    record: {
      newSteps: [activity(2, { cancelled: true, deliveredSeq: 2 }), activity(3, { afterDeliveredSeq: 2 })],
      deliveries: [delivered],
      outcome: outcomes.blocked,
    },
  },
  'claimed-completed': {
    why: 'the run returns',
    grant: 'claimed',
    record: { newSteps: [], deliveries: [delivered], outcome: outcomes.completed },
  },
  'claimed-failed': {
    why: 'the run throws (also the unstorable-turn fallback: no steps, no deliveries)',
    grant: 'claimed',
    record: { newSteps: [], deliveries: [], outcome: outcomes.failed },
  },
  'claimed-cancelled': {
    why: 'the run ends cancelled, with an activity it scheduled and never awaited cancelled with it',
    grant: 'claimed',
    record: { newSteps: [activity(2)], deliveries: [delivered], outcome: outcomes.cancelled },
  },
  'claimed-blocked-progress': {
    why: 'the code called ctx.setProgress',
    grant: 'claimed',
    record: {
      newSteps: [activity(2)],
      deliveries: [delivered],
      outcome: outcomes.blocked,
      progress: { value: 50 },
    },
  },
  'claimed-completed-progress': {
    why: 'the code set progress and returned (a failed run drops its progress: Replay.finish)',
    grant: 'claimed',
    record: { newSteps: [], deliveries: [delivered], outcome: outcomes.completed, progress: { value: 100 } },
  },
  'claimed-blocked-signal-taken': {
    why: 'a wait made in this turn takes a pending signal at once',
    grant: 'claimed',
    record: { newSteps: [signalWaitTaking], deliveries: [delivered], outcome: outcomes.blocked },
  },
  'claimed-blocked-signal-by-position': {
    why: 'a wait recorded by an earlier turn takes a pending signal (Replay.handSignal: by position)',
    grant: 'claimed',
    record: { newSteps: [], deliveries: [byPosition], outcome: outcomes.blocked },
  },
  'claimed-blocked-signal-refused': {
    why: 'a pending signal whose payload does not fit the wait it reached',
    grant: 'claimed',
    record: { newSteps: [], deliveries: [], outcome: outcomes.blocked, rejectedSignals: [refused] },
  },
  'claimed-completed-signals': {
    why: 'a run that takes a signal, refuses another, and returns: the others pending are undelivered',
    grant: 'claimed',
    record: {
      newSteps: [],
      deliveries: [byPosition],
      outcome: outcomes.completed,
      rejectedSignals: [refused],
    },
  },
  'claimed-blocked-child': {
    why: 'a child run started without a key',
    grant: 'claimed',
    record: { newSteps: [child(null)], deliveries: [delivered], outcome: outcomes.blocked },
  },
  'claimed-blocked-child-keyed': {
    why: 'a child run started with a key (checked against existing runs)',
    grant: 'claimed',
    record: { newSteps: [child('ship-o-1')], deliveries: [delivered], outcome: outcomes.blocked },
  },
  'claimed-completed-child': {
    why: 'a run that starts a child and returns without awaiting it: the child step ends with the run',
    grant: 'claimed',
    record: { newSteps: [child('ship-o-1')], deliveries: [delivered], outcome: outcomes.completed },
  },
  'claimed-blocked-flow-control': {
    why: 'an activity under a concurrency key and a rate limit',
    grant: 'claimed',
    dispatch,
    record: {
      newSteps: [
        activity(2, {
          concurrency: { key: 'acct-1', limit: 2 },
          rateLimit: { key: 'acct-1', limit: 10, periodMs: 1000 },
        }),
      ],
      deliveries: [delivered],
      outcome: outcomes.blocked,
    },
  },
  'fused-blocked': {
    why: 'a fused step: the completion, the next activity granted eagerly, the run goes on',
    grant: 'fused',
    dispatch,
    record: {
      newSteps: [activity(2)],
      deliveries: [{ stepId: STEP_A, seq: 1, deliveredSeq: 2, firesTimer: false }],
      outcome: outcomes.blocked,
    },
  },
  'fused-blocked-undelivered': {
    why: 'a fused step whose completion the code does not take yet (awaiting another step first)',
    grant: 'fused',
    record: { newSteps: [], deliveries: [], outcome: outcomes.blocked },
  },
  'fused-completed': {
    why: 'a fused step whose turn returns',
    grant: 'fused',
    record: {
      newSteps: [],
      deliveries: [{ stepId: STEP_A, seq: 1, deliveredSeq: 2, firesTimer: false }],
      outcome: outcomes.completed,
      progress: { value: 'done' },
    },
  },
  'fused-blocked-child-keyed-flow-control': {
    why: 'a fused step whose turn starts a keyed child and a flow-controlled activity',
    grant: 'fused',
    record: {
      newSteps: [child('ship-o-1'), activity(7, { concurrency: { key: 'acct-1', limit: 2 } })],
      deliveries: [{ stepId: STEP_A, seq: 1, deliveredSeq: 2, firesTimer: false }],
      outcome: outcomes.blocked,
    },
  },
};

describe('the turn commit statement', () => {
  for (const [name, scenario] of Object.entries(scenarios)) {
    it(`renders as pinned for ${name}: ${scenario.why}`, async () => {
      await expect(`-- ${name}: ${scenario.why}\n${await render(scenario)}`).toMatchFileSnapshot(
        `__snapshots__/${name}.sql`,
      );
    });
  }

  it('renders as pinned for every combination of switches that can occur', async () => {
    const lines: string[] = [];
    for (const c of combinations()) {
      const text = await render(c.scenario);
      lines.push(`${c.name} ${createHash('sha256').update(text).digest('hex').slice(0, 16)}`);
    }
    await expect(`${lines.join('\n')}\n`).toMatchFileSnapshot('__snapshots__/combinations.txt');
  });
});

/**
 * Every combination of the statement's switches a caller can produce, and why the others cannot occur:
 * - a fused step's turn sees only its completion, no pending signals (TurnParams.signals): it takes none, refuses
 *   none, and completes no wait by position;
 * - a wait completed by position always takes a signal (Replay.handSignal is its only source);
 * - a keyed child is a child started;
 * - a failed turn carries no progress (Replay.finish drops it).
 * Every end kind, progress, signals (none / taken / taken by position), refused signals, children (none / started /
 * keyed) and flow-control keys combine freely otherwise: each is decided by what the code does, independently.
 */
function* combinations(): Generator<{ name: string; scenario: Scenario }> {
  for (const grant of ['claimed', 'fused'] as const) {
    for (const end of Object.keys(outcomes) as End[]) {
      for (const progress of [false, true]) {
        if (progress && end === 'failed') continue;
        for (const signals of ['none', 'taken', 'by-position'] as const) {
          if (grant === 'fused' && signals !== 'none') continue;
          for (const refusing of [false, true]) {
            if (grant === 'fused' && refusing) continue;
            for (const children of ['none', 'started', 'keyed'] as const) {
              for (const flow of [false, true]) {
                const newSteps: NewStep[] = [
                  activity(2, flow ? { concurrency: { key: 'acct-1', limit: 2 } } : {}),
                  ...(signals === 'taken' ? [signalWaitTaking] : []),
                  ...(children === 'none' ? [] : [child(children === 'keyed' ? 'ship-o-1' : null)]),
                ];
                const deliveries: Delivery[] = [
                  grant === 'fused'
                    ? { stepId: STEP_A, seq: 1, deliveredSeq: 2, firesTimer: false }
                    : delivered,
                  ...(signals === 'by-position' ? [byPosition] : []),
                ];
                const name = [
                  grant,
                  end,
                  ...(progress ? ['progress'] : []),
                  ...(signals === 'none' ? [] : [`signal-${signals}`]),
                  ...(refusing ? ['signal-refused'] : []),
                  ...(children === 'none' ? [] : [`child-${children}`]),
                  ...(flow ? ['flow-control'] : []),
                ].join('+');
                yield {
                  name,
                  scenario: {
                    grant,
                    dispatch,
                    record: {
                      newSteps,
                      deliveries,
                      outcome: outcomes[end],
                      ...(progress ? { progress: { value: 1 } } : {}),
                      ...(refusing ? { rejectedSignals: [refused] } : {}),
                    },
                  },
                };
              }
            }
          }
        }
      }
    }
  }
}
