/**
 * Issue 10's poison cases 1–5 through real worker processes, on PostgreSQL and on PGlite: values that used to be
 * accepted and then failed a statement on a worker (an unstorable activity outcome, an overflowing retry policy
 * in a step row, an unstorable workflow output, bad heartbeat details, nested fenced transactions), each next to
 * a healthy run on the same worker that must complete. test/core/bad-input.test.ts has the same cases in
 * process; here the activities and workflows (test/fixtures/poison-definitions.ts) run in a worker process and
 * report what their code saw over IPC, so executions are counted from the activity's own reports.
 *
 * PostgreSQL: this process runs the driver (test/fixtures/poison-cases.ts) against one worker process
 * (test/fixtures/worker-main.ts with the poison definitions as its extension module). PGlite: one process owns
 * a data directory, so a child (test/fixtures/poison-pglite-main.ts) opens the engine on a file-backed PGlite in
 * a temporary directory, serves the definitions, runs the same driver itself and sends each case's record; the
 * expectations below are the same for both.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sql } from 'drizzle-orm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEngine, type Engine } from '@palisade/engine';
import {
  poisonCases,
  POISON_TIMINGS,
  type HeartbeatOutcome,
  type NestedOutcome,
  type OutputsOutcome,
  type PoisonCaseName,
  type PoisonOutcomes,
  type RetryPolicyOutcome,
  type Settled,
  type WorkflowOutcome,
} from '../fixtures/poison-cases.js';
import { poisonTableDdl } from '../fixtures/poison-definitions.js';
import type { WorkerProcessConfig } from '../fixtures/worker-protocol.js';
import type { Driver } from '../support/engine.js';
import { useTestDatabase } from '../support/postgres.js';
import { spawnWorkerProcess, type WorkerProcess } from '../support/worker-process.js';

const POISON_DEFINITIONS = fileURLToPath(new URL('../fixtures/poison-definitions.ts', import.meta.url));
const POISON_PGLITE_MAIN = fileURLToPath(new URL('../fixtures/poison-pglite-main.ts', import.meta.url));

const processConfig = (workerId: string, rest: Partial<WorkerProcessConfig>): WorkerProcessConfig => ({
  databaseUrl: '',
  schema: 'palisade',
  workerId,
  timings: POISON_TIMINGS,
  pollIntervalMs: 100,
  concurrency: 4,
  ...rest,
});

const failedWith = (code: string, message?: string) => ({
  ok: false,
  error: expect.objectContaining({
    code,
    ...(message !== undefined ? { message: expect.stringContaining(message) as unknown } : {}),
  }) as unknown,
});
const completedWith = (value: unknown): Settled => ({ ok: true, value });

function expectOutputs(o: OutputsOutcome): void {
  const invalid = (path: string) =>
    `[VALIDATION_FAILED] output of activity poison-output is invalid: s: ${path}`;
  expect(
    o.cases.map((c) => ({
      kind: c.kind,
      result: c.result,
      status: c.step.status,
      nonRetryable: c.step.error?.nonRetryable,
      message: c.step.error?.message,
      attempts: c.attempts,
      executions: c.executions,
    })),
  ).toEqual([
    ...(
      [
        ['nul', 'contains a NUL'],
        ['bigint', '5n is a BigInt'],
        ['surrogate', 'contains a lone surrogate'],
      ] as const
    ).map(([kind, path]) => ({
      kind,
      result: failedWith('RUN_FAILED', `s: ${path}`),
      status: 'failed',
      nonRetryable: true,
      message: expect.stringContaining(invalid(path)) as unknown,
      attempts: ['failed'],
      executions: 1,
    })),
    {
      kind: 'throw-nul',
      result: failedWith('RUN_FAILED', 'x\uFFFD'),
      status: 'failed',
      nonRetryable: true,
      message: 'x\uFFFD',
      attempts: ['failed'],
      executions: 1,
    },
    // A retryable error is retried by its policy (3 attempts), each failure recorded with its cause cleaned:
    // never a lost completion write left to expire.
    {
      kind: 'throw-nul-retryable',
      result: failedWith('RUN_FAILED', 'x\uFFFD'),
      status: 'failed',
      nonRetryable: false,
      message: 'x\uFFFD',
      attempts: ['failed', 'failed', 'failed'],
      executions: 3,
    },
  ]);
  expect(o.healthy).toEqual(completedWith({ n: 42 }));
}

function expectRetryPolicy(o: RetryPolicyOutcome): void {
  expect(o.storedPolicy).toMatchObject({ backoffCoefficient: 1e308, initialIntervalMs: 2_592_000_000 });
  expect(o.neighbour).toEqual(completedWith({ n: 2 }));
  expect(o.poisoned).toEqual(completedWith({ v: 'poisoned policy' }));
  expect(o.workerErrors).toEqual([]);
}

function expectWorkflow(o: WorkflowOutcome): void {
  expect(o.cases).toEqual([
    {
      kind: 'output',
      result: failedWith('RUN_FAILED', 's: contains a NUL'),
      turnsCommitted: ['failed'],
      turnClaims: 1,
      cancel: completedWith('failed'),
      runStatus: 'failed',
    },
    {
      kind: 'shifty',
      result: failedWith(
        'RUN_FAILED',
        'the database refused to store a turn of workflow poison-unstorable: [DATABASE_ERROR] 22P05',
      ),
      turnsCommitted: ['failed'],
      turnClaims: 1,
      cancel: completedWith('failed'),
      runStatus: 'failed',
    },
  ]);
  expect(o.healthy).toEqual(completedWith({ n: 8 }));
}

function expectHeartbeat(o: HeartbeatOutcome): void {
  expect(o.noisy).toEqual(completedWith({ beats: 1 }));
  expect(o.steady).toEqual(completedWith({ ok: true }));
  const refused = (call: string, message: string) => ({
    activity: 'poison-noisy',
    call,
    ok: false,
    code: 'VALIDATION_FAILED',
    message: expect.stringContaining(message) as unknown,
  });
  expect(o.observed).toEqual([
    refused('heartbeat:bigint', 'heartbeat details of activity poison-noisy is invalid: n: 1n is a BigInt'),
    refused('heartbeat:nul', 's: contains a NUL'),
    refused('heartbeat:circular', 'self: is a circular reference'),
    { activity: 'poison-noisy', call: 'heartbeat:good', ok: true },
    { activity: 'poison-steady', call: 'heartbeat:after-noisy', ok: true },
    { activity: 'poison-steady', call: 'signal-not-aborted', ok: true },
  ]);
  // After the refusals the worker's shared heartbeat statement still renewed both attempts' leases (the beat
  // noisy's good heartbeat waited for carries steady too), and no beat lost one. A beat may count an attempt
  // neither renewed nor lost: one whose own completion committed while the beat was in flight.
  expect(o.beatsAfterRefusal.some((b) => b.attempts >= 2 && b.renewed === b.attempts)).toBe(true);
  expect(o.beatsAfterRefusal.filter((b) => b.lost > 0)).toEqual([]);
  expect(o.heartbeatFailures).toEqual([]);
  expect(o.aborted).toEqual([]);
  expect(o.steadyStep.heartbeat_details).toEqual({ page: 2 });
  expect(o.noisyStep.heartbeat_details).toEqual({ fine: true });
  expect(o.healthy).toEqual(completedWith({ n: 4 }));
}

function expectNested(o: NestedOutcome, driver: Driver): void {
  const nested = (call: string) => ({
    activity: 'poison-nester',
    call,
    ok: false,
    code: 'FENCED_TRANSACTION_NESTED',
    message: expect.stringContaining('fenced transactions do not nest') as unknown,
  });
  expect(o.result).toEqual(completedWith({ done: true }));
  expect(o.observed).toEqual([
    nested('inner:inner-of-rolled-back'),
    { activity: 'poison-nester', call: 'outer:rolled-back', ok: true },
    nested('inner:inner-of-committed'),
    // On PostgreSQL a heartbeat has its own connection; on PGlite the transaction holds the one connection, so a
    // heartbeat inside it is refused rather than left to hang the engine.
    driver === 'postgres'
      ? { activity: 'poison-nester', call: 'heartbeat-inside', ok: true }
      : {
          activity: 'poison-nester',
          call: 'heartbeat-inside',
          ok: false,
          code: 'FENCED_TRANSACTION_NESTED',
          message: expect.stringContaining('ctx.heartbeat was called inside') as unknown,
        },
    { activity: 'poison-nester', call: 'outer:committed', ok: true },
  ]);
  // The inner bodies never ran; the rolled-back outer wrote nothing, the committed one its own row only.
  expect(o.marks).toEqual(['committed-outer']);
  expect(o.listed).toMatchObject({ ok: true });
  expect(o.healthy).toEqual(completedWith({ n: 6 }));
}

/**
 * After all five cases, read from the database itself: every run ended (7 failed: five poison outputs, two
 * workflows; 9 completed: the healthy neighbours and the runs the cases expected to complete) and no attempt or
 * turn is left without an outcome, so nothing is waiting to be replayed.
 */
async function expectEveryRunEnded(engine: Engine): Promise<void> {
  const n = engine.names;
  const runs = await engine.database.rows<{ status: string; count: number }>(sql`
    SELECT status, count(*)::int AS count FROM ${n.runs} GROUP BY status ORDER BY status`);
  expect(runs).toEqual([
    { status: 'completed', count: 9 },
    { status: 'failed', count: 7 },
  ]);
  const [open] = await engine.database.rows<{ count: number }>(sql`
    SELECT count(*)::int AS count FROM ${n.attempts} WHERE outcome IS NULL`);
  expect(open?.count).toBe(0);
}

/** The five cases, by name, as behaviour sentences with their expectations. */
const CASES: readonly [PoisonCaseName, string, (o: never, driver: Driver) => void][] = [
  [
    'outputs',
    'records an activity outcome the database cannot store as a non-retryable failure with its reason after one execution, and a healthy run on the worker completes',
    expectOutputs,
  ],
  [
    'retryPolicy',
    'keeps claiming from a queue holding a step whose stored retry policy overflows the delay, and its healthy neighbour completes',
    expectRetryPolicy,
  ],
  [
    'workflow',
    'fails a workflow run whose output cannot be stored in one recorded turn, with no replay, and cancel answers failed',
    expectWorkflow,
  ],
  [
    'heartbeat',
    'refuses bad heartbeat details in that ctx.heartbeat call while another attempt on the worker keeps its lease renewed and is not aborted',
    expectHeartbeat,
  ],
  [
    'nested',
    'refuses a nested fenced transaction with FENCED_TRANSACTION_NESTED, commits nothing of it, and the engine keeps serving',
    expectNested,
  ],
];

describe('poison inputs through a worker process on PostgreSQL', () => {
  const url = useTestDatabase();
  let engine: Engine | undefined;
  let worker: WorkerProcess | undefined;
  let cases: ReturnType<typeof poisonCases>;

  beforeAll(async () => {
    const schema = `t_${randomBytes(5).toString('hex')}`;
    engine = await createEngine({ databaseUrl: url(), schema });
    await engine.database.rows(sql.raw(poisonTableDdl(schema)));
    worker = await spawnWorkerProcess(
      processConfig('poison-pg', {
        databaseUrl: url(),
        schema,
        extensionModule: POISON_DEFINITIONS,
        poolSize: 4,
      }),
    );
    cases = poisonCases(engine, worker);
  }, 120_000);

  afterAll(async () => {
    await worker?.stop(1_000);
    await engine?.close({ graceMs: 0 });
  });

  for (const [name, sentence, expectations] of CASES) {
    it(
      sentence,
      async () => {
        const outcome = await cases[name]();
        (expectations as (o: PoisonOutcomes[typeof name], d: Driver) => void)(outcome, 'postgres');
      },
      60_000,
    );
  }

  it('leaves every run ended and no attempt or turn open once the cases are done', async () => {
    if (!engine) throw new Error('no engine');
    await expectEveryRunEnded(engine);
  });
});

describe('poison inputs through a worker process on PGlite', () => {
  let dir: string | undefined;
  let child: WorkerProcess | undefined;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'palisade-poison-'));
    child = await spawnWorkerProcess(processConfig('poison-pglite', { dataDir: join(dir, 'db') }), {
      entry: POISON_PGLITE_MAIN,
    });
  }, 150_000);

  afterAll(async () => {
    await child?.stop(1_000);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const [name, sentence, expectations] of CASES) {
    it(
      sentence,
      async () => {
        const reported = await child?.waitFor('poison:case', (m) => m.name === name, { timeoutMs: 60_000 });
        (expectations as (o: unknown, d: Driver) => void)(reported?.outcome, 'pglite');
      },
      70_000,
    );
  }

  it('ends the PGlite process cleanly once every case was reported, leaving every run ended in its data directory', async () => {
    expect(await child?.exited).toEqual({ code: 0, signal: null });
    expect(child?.all('process:fatal')).toEqual([]);
    if (!dir) throw new Error('no data directory');
    const engine = await createEngine({ dataDir: join(dir, 'db'), schema: 'palisade', migrate: false });
    try {
      await expectEveryRunEnded(engine);
    } finally {
      await engine.close();
    }
  }, 60_000);
});
