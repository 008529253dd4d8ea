/**
 * Bad input is refused at the door and never harms its neighbours (issue 10).
 *
 * Part 1 is a table of bad values through every public call: each must be refused by the call that brought it
 * with a PalisadeError whose code is asserted and whose message names the option or the field path, and
 * nothing may be written. Part 2 is the poison cases: values that used to be accepted and then failed a
 * statement on a worker — an unstorable activity outcome, a bad retry policy, an unstorable workflow turn, bad
 * heartbeat details, nested or aborted fenced transactions — each next to a healthy run on the same worker,
 * queue and heartbeat statement that must complete untouched. Both parts run on PostgreSQL and PGlite.
 */
import { sql } from 'drizzle-orm';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { UNCLAIMED_AFTER_MS, createEngine, type Engine } from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import {
  ApplicationFailure,
  defineActivity,
  defineSignal,
  defineWorkflow,
  isPalisadeError,
  type PalisadeErrorCode,
} from '@palisade/sdk';
import { OVERFLOWING_RETRY_POLICY } from '../fixtures/poison-cases.js';
import { useEngineTarget } from '../support/engine.js';
import { setStepRetryPolicy } from '../support/step-policy.js';
import { attemptsOf, gate, settle, stepOf, workerEvent } from '../worker/helpers.js';
import { emptyActivity } from '../fixtures/empty-activity.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputActivity, noInputWorkflow } from '../fixtures/no-input.js';
import { oneStepWorkflow } from '../fixtures/one-step-workflow.js';

const anything = z.object({ v: z.unknown() });

const echo = defineActivity({
  name: 'echo',
  input: anything,
  output: anything,
  run: (input) => Promise.resolve(input),
});

const healthy = defineActivity({
  name: 'healthy',
  input: z.object({ n: z.number() }),
  output: z.object({ n: z.number() }),
  run: ({ n }) => Promise.resolve({ n: n + 1 }),
});

const dated = defineActivity({
  name: 'dated',
  input: z.object({ at: z.date() }),
  output: z.object({}),
  run: () => Promise.resolve({}),
});

const flow = defineWorkflow({
  name: 'flow',
  input: anything,
  output: anything,
  run: (input) => Promise.resolve(input),
});

const circular: Record<string, unknown> = { a: 1 };
circular.self = circular;

/** Rows the engine wrote, in all: a refused call must leave these unchanged. */
async function rowCounts(engine: Engine): Promise<Record<string, number>> {
  const n = engine.names;
  const [row] = await engine.database.rows<Record<string, number>>(sql`
    SELECT (SELECT count(*) FROM ${n.runs})::int AS runs, (SELECT count(*) FROM ${n.steps})::int AS steps,
           (SELECT count(*) FROM ${n.events})::int AS events, (SELECT count(*) FROM ${n.attempts})::int AS attempts`);
  return row ?? {};
}

interface DoorCase {
  readonly name: string;
  readonly call: (engine: Engine) => unknown;
  readonly code: PalisadeErrorCode;
  /** What the message must contain: the option or the field path. */
  readonly names: string;
}

const inputValues: [string, unknown, string][] = [
  ['a NUL in a string', { s: 'a\u0000b' }, 'v.s: contains a NUL'],
  ['a lone surrogate', ['\uD800'], 'v.0: contains a lone surrogate'],
  ['a NUL in a key', { ['k\u0000']: 1 }, 'v.k\\u0000: its key contains a NUL'],
  ['a BigInt', { n: 5n }, 'v.n: 5n is a BigInt'],
  ['NaN', { x: Number.NaN }, 'v.x: NaN is not JSON'],
  ['Infinity', [1, Number.POSITIVE_INFINITY], 'v.1: Infinity is not JSON'],
  ['undefined in an array', [undefined], 'v.0: undefined is not JSON'],
  ['a Date', { at: new Date(0) }, 'v.at: a Date would come back as a string'],
  ['a Map', new Map([[1, 2]]), 'v: a Map would come back as {}'],
  ['a function', { f: () => 1 }, 'v.f: a function is not JSON'],
  ['a cycle', circular, 'v.self: is a circular reference'],
];

const doorCases: DoorCase[] = [
  ...inputValues.map(([name, v, names]) => ({
    name: `enqueue input holding ${name}`,
    call: (e: Engine) => e.client.enqueue(echo, { v }),
    code: 'VALIDATION_FAILED' as const,
    names,
  })),
  ...inputValues.map(([name, v, names]) => ({
    name: `start input holding ${name}`,
    call: (e: Engine) => e.client.start(flow, { v }),
    code: 'VALIDATION_FAILED' as const,
    names,
  })),
  {
    name: 'a z.date() input, which would reach the worker as a string',
    call: (e) => e.client.enqueue(dated, { at: new Date() }),
    code: 'VALIDATION_FAILED',
    names: 'at: a Date',
  },
  {
    name: 'an input over the size cap',
    call: (e) => e.client.enqueue(echo, { v: 'x'.repeat(1_100_000) }),
    code: 'PAYLOAD_TOO_LARGE',
    names: 'input of activity echo is 1,100,008 bytes',
  },
  {
    name: 'enqueue of something that is not an activity',
    call: (e) => e.client.enqueue({} as typeof echo, { v: 1 }),
    code: 'INVALID_OPTIONS',
    names: 'activity: must be an activity from defineActivity()',
  },
  {
    name: 'start of something that is not a workflow',
    call: (e) => e.client.start(null as unknown as typeof flow, { v: 1 }),
    code: 'INVALID_OPTIONS',
    names: 'workflow: must be a workflow from defineWorkflow()',
  },
  {
    name: 'start of a copy of a workflow under a name defineWorkflow() refuses',
    call: (e) => e.client.start({ ...flow, name: 'w'.repeat(10_000) }, { v: 1 }),
    code: 'INVALID_OPTIONS',
    names: 'workflow.name: must be 1–128 characters',
  },
  {
    name: 'enqueue of a copy of an activity on a queue defineActivity() refuses',
    call: (e) => e.client.enqueue({ ...echo, queue: 'a queue' }, { v: 1 }),
    code: 'INVALID_OPTIONS',
    names: 'activity.queue: must be 1–128 characters',
  },
  {
    name: 'a worker serving a copy of an activity under a name defineActivity() refuses',
    call: (e) => Promise.resolve(e.worker({ activities: [{ ...echo, name: 'echo again' }] })),
    code: 'INVALID_OPTIONS',
    names: 'activities.0.name: must be 1–128 characters',
  },
  {
    name: 'a schedule of a copy of a workflow under a name defineWorkflow() refuses',
    call: (e) =>
      e.schedules.create({ id: 'copy', everyMs: '1m', workflow: { ...flow, name: '' }, input: { v: 1 } }),
    code: 'INVALID_OPTIONS',
    names: 'workflow.name: must be 1–128 characters',
  },
  {
    name: 'enqueue delayMs of 30 days',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { delayMs: '30d' }),
    code: 'INVALID_OPTIONS',
    names: 'delayMs: "30d" is too long',
  },
  {
    name: 'enqueue delayMs NaN',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { delayMs: Number.NaN }),
    code: 'INVALID_OPTIONS',
    names: 'delayMs: NaN is not a duration',
  },
  {
    name: 'enqueue startToCloseTimeoutMs of a wrong type',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { startToCloseTimeoutMs: true as unknown as number }),
    code: 'INVALID_OPTIONS',
    names: 'startToCloseTimeoutMs: true is not a duration',
  },
  {
    name: 'enqueue leaseMs out of range',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { leaseMs: 1e12 }),
    code: 'INVALID_OPTIONS',
    names: 'leaseMs: 1000000000000 is too long',
  },
  {
    name: 'enqueue priority of a wrong type',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { priority: 'high' as unknown as number }),
    code: 'INVALID_OPTIONS',
    names: 'priority',
  },
  {
    name: 'an unknown enqueue option',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { delay: 5 } as never),
    code: 'INVALID_OPTIONS',
    names: 'delay',
  },
  {
    name: 'an idempotency key with a NUL',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { key: 'k\u0000' }),
    code: 'INVALID_OPTIONS',
    names: 'key: must be storable text',
  },
  {
    name: 'a start key with a lone surrogate',
    call: (e) => e.client.start(flow, { v: 1 }, { key: '\uDC00' }),
    code: 'INVALID_OPTIONS',
    names: 'key: must be storable text',
  },
  {
    name: "a retry policy whose initial interval '30d' overflows the delay",
    call: (e) => e.client.enqueue(echo, { v: 1 }, { retry: { initialIntervalMs: '30d' } }),
    code: 'INVALID_OPTIONS',
    names: 'initialIntervalMs: "30d" is too long',
  },
  {
    name: 'a retry policy with backoffCoefficient 1e308',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { retry: { backoffCoefficient: 1e308 } }),
    code: 'INVALID_OPTIONS',
    names: 'backoffCoefficient: initialIntervalMs × backoffCoefficient = 1000 × 1e+308 overflows',
  },
  {
    name: 'a retry policy with a large maximum interval and many attempts',
    call: (e) =>
      e.client.enqueue(echo, { v: 1 }, { retry: { maximumIntervalMs: '30d', maximumAttempts: 5_000 } }),
    code: 'INVALID_OPTIONS',
    names: 'maximumIntervalMs: "30d" is too long',
  },
  {
    name: 'an unknown retry option',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { retry: { attempts: 3 } as never }),
    code: 'INVALID_OPTIONS',
    names: 'attempts',
  },
  {
    name: "result({ timeoutMs: 'soon' })",
    call: (e) => e.client.getHandle('00000000-0000-4000-8000-000000000000').result({ timeoutMs: 'soon' }),
    code: 'INVALID_OPTIONS',
    names: 'timeoutMs: "soon" is not a duration',
  },
  {
    name: 'result({ timeoutMs: 1e12 })',
    call: (e) => e.client.getHandle('00000000-0000-4000-8000-000000000000').result({ timeoutMs: 1e12 }),
    code: 'INVALID_OPTIONS',
    names: 'timeoutMs: 1000000000000 is too long',
  },
  {
    name: 'an unknown result option',
    call: (e) => e.client.getHandle('00000000-0000-4000-8000-000000000000').result({ wait: 1 } as never),
    code: 'INVALID_OPTIONS',
    names: 'wait',
  },
  {
    name: 'cancel of an id that is not a UUID',
    call: (e) => e.client.getHandle('not-a-run').cancel(),
    code: 'RUN_NOT_FOUND',
    names: 'run not-a-run does not exist',
  },
  {
    name: 'a cancel reason with a NUL',
    call: (e) => e.client.getHandle('00000000-0000-4000-8000-000000000000').cancel('why\u0000'),
    code: 'INVALID_OPTIONS',
    names: 'cancel reason: contains a NUL',
  },
  {
    name: 'a list limit out of range',
    call: (e) => e.client.list({ limit: -1 }),
    code: 'INVALID_OPTIONS',
    names: 'limit: must be ≥ 1',
  },
  {
    name: 'a list status of a wrong value',
    call: (e) => e.client.list({ status: 'done' as never }),
    code: 'INVALID_OPTIONS',
    names: 'status',
  },
  {
    name: 'a start priority out of range',
    call: (e) => e.client.start(flow, { v: 1 }, { priority: 1e9 }),
    code: 'INVALID_OPTIONS',
    names: 'priority',
  },
  {
    name: 'an unknown start option',
    // `delay`, start's old name for delayMs, is now unknown there, as on enqueue.
    call: (e) => e.client.start(flow, { v: 1 }, { delay: 5 } as never),
    code: 'INVALID_OPTIONS',
    names: 'delay',
  },
  {
    name: 'an enqueue queue name with a NUL',
    call: (e) => e.client.enqueue(echo, { v: 1 }, { queue: 'q\u0000' }),
    code: 'INVALID_OPTIONS',
    names: 'queue',
  },
  {
    name: 'an unknown describe option',
    call: (e) => e.client.getHandle('00000000-0000-4000-8000-000000000000').describe({ all: true } as never),
    code: 'INVALID_OPTIONS',
    names: 'all',
  },
  {
    name: 'an unknown list filter',
    call: (e) => e.client.list({ kind: 'workflow' } as never),
    code: 'INVALID_OPTIONS',
    names: 'kind',
  },
  {
    name: 'a worker concurrency of a wrong type',
    call: (e) => e.worker({ activities: [echo], concurrency: '10' as unknown as number }),
    code: 'INVALID_OPTIONS',
    names: 'concurrency',
  },
  {
    name: 'a worker concurrency out of range',
    call: (e) => e.worker({ activities: [echo], concurrency: 1e6 }),
    code: 'INVALID_OPTIONS',
    names: 'concurrency: must be ≤ 1000',
  },
  {
    name: 'a worker prefetch below zero',
    call: (e) => e.worker({ activities: [echo], prefetch: -1 }),
    code: 'INVALID_OPTIONS',
    names: 'prefetch: must be ≥ 0 (0 claims only for free slots)',
  },
  {
    name: 'a worker heartbeatIntervalMs out of range',
    call: (e) => e.worker({ activities: [echo], heartbeatIntervalMs: 1e12 }),
    code: 'INVALID_OPTIONS',
    names: 'heartbeatIntervalMs: 1000000000000 is too long',
  },
  {
    name: 'worker queues of a wrong type',
    call: (e) => e.worker({ activities: [echo], queues: 'default' as unknown as string[] }),
    code: 'INVALID_OPTIONS',
    names: 'queues',
  },
  {
    name: "a worker pollIntervalMs of '30d'",
    call: (e) => e.worker({ activities: [echo], pollIntervalMs: '30d' }),
    code: 'INVALID_OPTIONS',
    names: 'pollIntervalMs: "30d" is too long',
  },
  {
    name: 'a worker turnLeaseMs of 1e12',
    call: (e) => e.worker({ workflows: [flow], turnLeaseMs: 1e12 }),
    code: 'INVALID_OPTIONS',
    names: 'turnLeaseMs: 1000000000000 is too long',
  },
  {
    name: 'a worker shutdownGraceMs NaN',
    call: (e) => e.worker({ activities: [echo], shutdownGraceMs: Number.NaN }),
    code: 'INVALID_OPTIONS',
    names: 'shutdownGraceMs: NaN is not a duration',
  },
  {
    name: 'a workerId with a NUL',
    call: (e) => e.worker({ activities: [echo], workerId: 'w\u0000' }),
    code: 'INVALID_OPTIONS',
    names: 'workerId: must be storable text',
  },
  {
    name: 'an unknown worker option',
    call: (e) => e.worker({ activities: [echo], concurency: 2 } as never),
    code: 'INVALID_OPTIONS',
    names: 'concurency',
  },
  {
    name: 'stop({ graceMs: 1e12 })',
    call: (e) => e.worker({ activities: [echo] }).stop({ graceMs: 1e12 }),
    code: 'INVALID_OPTIONS',
    names: 'graceMs: 1000000000000 is too long',
  },
  {
    name: "stop({ graceMs: 'later' })",
    call: (e) => e.worker({ activities: [echo] }).stop({ graceMs: 'later' }),
    code: 'INVALID_OPTIONS',
    names: 'graceMs: "later" is not a duration',
  },
];

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`bad input at the door on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('refuses every bad value in the table with its code and path, writes nothing, and a healthy run then completes', async () => {
      const engine = await target.engine();
      const before = await rowCounts(engine);
      const failures: string[] = [];
      for (const c of doorCases) {
        let error: unknown;
        try {
          await c.call(engine);
          failures.push(`${c.name}: was accepted`);
          continue;
        } catch (caught) {
          error = caught;
        }
        if (!isPalisadeError(error, c.code)) {
          failures.push(`${c.name}: expected ${c.code}, got ${String(error)}`);
        } else if (!error.message.includes(c.names)) {
          failures.push(`${c.name}: message does not name ${JSON.stringify(c.names)}: ${error.message}`);
        }
      }
      expect(failures).toEqual([]);
      expect(await rowCounts(engine)).toEqual(before);

      await startWorker(engine, [healthy, echo]);
      const handle = await engine.client.enqueue(healthy, { n: 1 });
      await expect(handle.result({ timeoutMs: '20s' })).resolves.toEqual({ n: 2 });
    });

    it('repeats at most a capped excerpt of a 10,000-character id, name or key in every message', async () => {
      const engine = await target.engine();
      const long = 'x'.repeat(10_000);
      const uuidLike = `00000000-0000-4000-8000-${'0'.repeat(10_000)}`;
      const signal = defineSignal({ name: 'approve', payload: z.object({}) });
      const calls: [string, () => unknown][] = [
        ['defineWorkflow with a long name', () => defineWorkflow({ ...flowOptions, name: long })],
        ['defineActivity with a long name', () => defineActivity({ ...echoOptions, name: long })],
        ['defineSignal with a long name', () => defineSignal({ name: long, payload: z.object({}) })],
        [
          'start of a workflow with a long unknown option',
          () => engine.client.start(flow, { v: 1 }, { [long]: 1 }),
        ],
        ['enqueue with a long key', () => engine.client.enqueue(echo, { v: 1 }, { key: long })],
        ['enqueue with a long delay string', () => engine.client.enqueue(echo, { v: 1 }, { delayMs: long })],
        ['enqueue input with a long field name', () => engine.client.enqueue(dated, { [long]: 1 } as never)],
        ['getHandle(long id).describe()', () => engine.client.getHandle(long).describe()],
        ['getHandle(long id).result()', () => engine.client.getHandle(uuidLike).result({ timeoutMs: 10 })],
        ['getHandle(long id).cancel()', () => engine.client.getHandle(long).cancel()],
        ['signal of a long run id', () => engine.client.signal(long, signal, {})],
        ['retry of a long run id', () => engine.client.retry(long)],
        ['watch with a long cursor', () => engine.client.getHandle(long).watch({ after: long }).next()],
        ['schedules.get of a long id', () => engine.schedules.get(long)],
        ['schedules.update of a long id', () => engine.schedules.update(long, {})],
        [
          'schedules.create with a long id',
          () => engine.schedules.create({ id: long, cron: '* * * * *', workflow: flow, input: { v: 1 } }),
        ],
        [
          'schedules.create with a long cron',
          () => engine.schedules.create({ id: 's', cron: long, workflow: flow, input: { v: 1 } }),
        ],
      ];
      const failures: string[] = [];
      for (const [name, call] of calls) {
        const outcome = await settle(Promise.resolve().then(call));
        const error = (outcome as { error?: unknown }).error;
        if (outcome.ok) failures.push(`${name}: was accepted`);
        else if (!isPalisadeError(error)) failures.push(`${name}: not a PalisadeError: ${String(error)}`);
        else if (error.message.length > 700 || error.message.includes('x'.repeat(301)))
          failures.push(
            `${name}: message of ${error.message.length} characters: ${error.message.slice(0, 200)}`,
          );
        else if (
          error.message.includes('x'.repeat(100)) &&
          !/…\(\d[\d,]* more characters\)/.test(error.message)
        )
          failures.push(`${name}: the cut is not marked: ${error.message.slice(0, 200)}`);
      }
      expect(failures).toEqual([]);
    });

    it("takes result({ timeoutMs: '50ms' }) in the same duration forms as every other option", async () => {
      const engine = await target.engine();
      const handle = await engine.client.enqueue(echo, { v: 1 }, { queue: 'nobody-serves' });
      const outcome = await settle(handle.result({ timeoutMs: '50ms', pollIntervalMs: '10ms' }));
      const error = (outcome as { error: unknown }).error;
      expect(isPalisadeError(error, 'RESULT_TIMEOUT'), String(error)).toBe(true);
      expect((error as Error).message).toContain('after 50 ms');
    });

    it('wraps a database error with the SQL cut short and without the parameter values', async () => {
      const engine = await target.engine();
      const secret = `secret-${'x'.repeat(100_000)}`;
      const outcome = await settle(engine.database.rows(sql`SELECT ${secret}::int AS n`));
      expect(outcome.ok).toBe(false);
      const error = (outcome as { error: Error }).error;
      expect(isPalisadeError(error, 'DATABASE_ERROR')).toBe(true);
      expect(error.message).toMatch(/^\[DATABASE_ERROR\] 22P02 /);
      expect(error.message).not.toContain('secret');
      expect(error.message.length).toBeLessThan(800);
      expect(error.message).toContain('in statement: SELECT $1::int');
    });
  });
}

/** Calls refused before any database is touched: definitions and engine options. */
const definitionCases: { name: string; call: () => unknown; names: string }[] = [
  {
    name: 'createEngine with an unknown option',
    call: () => createEngine({ pool: 3 } as never),
    names: 'pool',
  },
  {
    name: 'createEngine poolSize of a wrong type',
    call: () => createEngine({ poolSize: '10' as unknown as number }),
    names: 'poolSize',
  },
  {
    name: 'createEngine lockTimeoutMs NaN',
    call: () => createEngine({ lockTimeoutMs: Number.NaN }),
    names: 'lockTimeoutMs: NaN is not a duration',
  },
  {
    name: "defineActivity leaseMs '2 hours'",
    call: () => defineActivity({ ...echoOptions, leaseMs: '2 hours' }),
    names: 'leaseMs: "2 hours" is not a duration',
  },
  {
    name: 'defineActivity startToCloseTimeoutMs out of range',
    call: () => defineActivity({ ...echoOptions, startToCloseTimeoutMs: 2 ** 31 }),
    names: 'startToCloseTimeoutMs: 2147483648 is too long',
  },
  {
    name: "defineActivity retry initialIntervalMs '30d'",
    call: () => defineActivity({ ...echoOptions, retry: { initialIntervalMs: '30d' } }),
    names: 'initialIntervalMs: "30d" is too long',
  },
  {
    name: 'defineActivity retry jitter of a wrong type',
    call: () => defineActivity({ ...echoOptions, retry: { jitter: '0.1' as unknown as number } }),
    names: 'jitter',
  },
  {
    name: 'defineActivity with an unknown option',
    call: () => defineActivity({ ...echoOptions, timeout: 5 } as never),
    names: 'timeout',
  },
  {
    name: 'defineWorkflow queue of a wrong type',
    call: () => defineWorkflow({ ...flowOptions, queue: 7 as unknown as string }),
    names: 'queue',
  },
];

const echoOptions = {
  name: 'echo',
  input: anything,
  output: anything,
  run: (input: { v: unknown }) => Promise.resolve(input),
};
const flowOptions = { name: 'flow', input: anything, output: anything, run: echoOptions.run };

describe('definitions and engine options at the door', () => {
  it.each(definitionCases)('refuses $name with INVALID_OPTIONS naming it', async ({ call, names }) => {
    const outcome = await settle(Promise.resolve().then(call));
    const error = (outcome as { error: unknown }).error;
    expect(isPalisadeError(error, 'INVALID_OPTIONS'), String(error)).toBe(true);
    expect((error as Error).message).toContain(names);
  });
});

describe('engine options at the door', () => {
  it('refuses createEngine({ poolSize: 1e9 }) naming poolSize, before connecting', async () => {
    const outcome = await settle(
      createEngine({ poolSize: 1e9, databaseUrl: 'postgres://nobody@127.0.0.1:1/x' }),
    );
    const error = (outcome as { error: unknown }).error;
    expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
    expect((error as Error).message).toContain('poolSize: must be ≤ 1000');
  });

  it("refuses createEngine({ statementTimeoutMs: '30d' }) naming the option", async () => {
    const outcome = await settle(createEngine({ statementTimeoutMs: '30d', dataDir: 'memory://' }));
    const error = (outcome as { error: unknown }).error;
    expect(isPalisadeError(error, 'INVALID_OPTIONS')).toBe(true);
    expect((error as Error).message).toContain('statementTimeoutMs: "30d" is too long');
  });
});

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`poison values on a worker never harm their neighbours, on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('records an activity output the database cannot store as a non-retryable failure, without a rerun', async () => {
      const runs: string[] = [];
      const outputs: Record<string, unknown> = {
        nul: { s: 'a\u0000b' },
        bigint: { s: 5n },
        surrogate: { s: '\uD800' },
      };
      const poison = defineActivity({
        name: 'poison',
        input: z.object({ kind: z.string() }),
        output: z.object({ s: z.unknown() }),
        retry: { maximumAttempts: 3, initialIntervalMs: 10 },
        run: ({ kind }) => {
          runs.push(kind);
          return Promise.resolve(outputs[kind] as { s: unknown });
        },
      });
      const engine = await target.engine();
      await startWorker(engine, [poison, healthy]);
      for (const kind of Object.keys(outputs)) {
        const handle = await engine.client.enqueue(poison, { kind });
        const outcome = await settle(handle.result({ timeoutMs: '20s' }));
        const error = (outcome as { error: unknown }).error;
        expect(isPalisadeError(error, 'RUN_FAILED')).toBe(true);
        const step = await stepOf(engine, handle.runId);
        expect(step.status).toBe('failed');
        expect(step.error?.nonRetryable).toBe(true);
        expect(step.error?.message).toContain('output of activity poison is invalid: s: ');
        expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual(['failed']);
      }
      expect(runs).toEqual(['nul', 'bigint', 'surrogate']);
      const ok = await engine.client.enqueue(healthy, { n: 41 });
      await expect(ok.result({ timeoutMs: '20s' })).resolves.toEqual({ n: 42 });
    });

    it('claims a step whose stored retry policy overflows the delay (a row from before the check) with its neighbours', async () => {
      const engine = await target.engine();
      const poisoned = await engine.client.enqueue(echo, { v: 'poisoned policy' });
      await setStepRetryPolicy(engine, poisoned.runId, OVERFLOWING_RETRY_POLICY);
      const neighbour = await engine.client.enqueue(healthy, { n: 1 });
      const worker = workerFor(engine, [echo, healthy]);
      const claimFailures: unknown[] = [];
      worker.events.on('worker:error', (e) => claimFailures.push(e.error));
      await worker.start();
      await expect(neighbour.result({ timeoutMs: '20s' })).resolves.toEqual({ n: 2 });
      await expect(poisoned.result({ timeoutMs: '20s' })).resolves.toEqual({ v: 'poisoned policy' });
      expect(claimFailures).toEqual([]);
    });

    it('records a thrown error with a NUL, a 5 MB message and BigInt details, cleaned and cut, once', async () => {
      let runs = 0;
      const thrower = emptyActivity('thrower', {
        retry: { maximumAttempts: 1 },
        run: () => {
          runs++;
          throw ApplicationFailure.nonRetryable(`bad\u0000${'m'.repeat(5_000_000)}`, 'Bad', { n: 1n });
        },
      });
      const engine = await target.engine();
      await startWorker(engine, [thrower, healthy]);
      const handle = await engine.client.enqueue(thrower, {});
      const outcome = await settle(handle.result({ timeoutMs: '20s' }));
      const error = (outcome as { error: Error }).error;
      expect(isPalisadeError(error, 'RUN_FAILED')).toBe(true);
      expect(error.message.length).toBeLessThan(10_000);
      const step = await stepOf(engine, handle.runId);
      expect(step.error?.message.startsWith('bad\uFFFDmmm')).toBe(true);
      expect(step.error?.message).toContain('characters in all]');
      expect(step.error?.details).toBeUndefined();
      expect((await attemptsOf(engine, handle.runId)).map((a) => a.outcome)).toEqual(['failed']);
      expect(runs).toBe(1);
      const ok = await engine.client.enqueue(healthy, { n: 1 });
      await expect(ok.result({ timeoutMs: '20s' })).resolves.toEqual({ n: 2 });
    });

    it('refuses bad heartbeat details in that ctx.heartbeat call, while a healthy attempt heartbeats on', async () => {
      const refused: unknown[] = [];
      const healthyRunning = gate();
      const release = gate();
      let healthySignalAborted = false;
      const noisy = noInputActivity('noisy', z.object({ beats: z.number() }), async (ctx) => {
        await healthyRunning.promise;
        for (const details of [{ n: 1n }, { s: 'a\u0000' }, circular]) {
          const outcome = await settle(ctx.heartbeat(details));
          refused.push(outcome.ok ? 'accepted' : (outcome as { error: unknown }).error);
        }
        // Details are stored as they were at the call, even if the object changes before the statement is sent.
        const progress: Record<string, unknown> = { fine: true };
        const beat = ctx.heartbeat(progress);
        progress.fine = 2n;
        await beat;
        release.open();
        return { beats: 1 };
      });
      const steady = noInputActivity('steady', z.object({ ok: z.boolean() }), async (ctx) => {
        healthyRunning.open();
        await release.promise;
        await ctx.heartbeat({ page: 2 });
        healthySignalAborted = ctx.signal.aborted;
        return { ok: true };
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [noisy, steady]);
      const failedHeartbeats: unknown[] = [];
      worker.events.on('heartbeat:failed', (e) => failedHeartbeats.push(e));
      await worker.start();
      const good = await engine.client.enqueue(steady, {});
      const bad = await engine.client.enqueue(noisy, {});
      await expect(bad.result({ timeoutMs: '20s' })).resolves.toEqual({ beats: 1 });
      await expect(good.result({ timeoutMs: '20s' })).resolves.toEqual({ ok: true });
      expect(refused.map((e) => (isPalisadeError(e, 'VALIDATION_FAILED') ? e.message : String(e)))).toEqual([
        expect.stringContaining('heartbeat details of activity noisy is invalid: n: 1n is a BigInt'),
        expect.stringContaining('s: contains a NUL'),
        expect.stringContaining('self: is a circular reference'),
      ]);
      expect(healthySignalAborted).toBe(false);
      expect(failedHeartbeats).toEqual([]);
      expect((await stepOf(engine, good.runId)).heartbeat_details).toEqual({ page: 2 });
      expect((await stepOf(engine, bad.runId)).heartbeat_details).toEqual({ fine: true });
    });

    it('refuses a nested fenced transaction and names an aborted one, and the engine stays usable', async () => {
      const seen: unknown[] = [];
      let heartbeatInside: { ok: boolean; error?: unknown } | undefined;
      let listInside: { ok: boolean; error?: unknown } | undefined;
      const engineRef: { current?: Engine } = {};
      const nester = defineActivity({
        name: 'nester',
        input: z.object({ mode: z.enum(['nested', 'aborted']) }),
        output: z.object({ done: z.boolean() }),
        retry: { maximumAttempts: 1 },
        async run({ mode }, ctx) {
          if (mode === 'nested') {
            await ctx.fencedTransaction(async () => {
              seen.push(await settle(ctx.fencedTransaction(() => Promise.resolve(1))));
              heartbeatInside = await settle(ctx.heartbeat());
              listInside = await settle(engineRef.current?.client.list() ?? Promise.resolve([]));
            });
          } else {
            const outcome = await settle(
              ctx.fencedTransaction(async (tx) => {
                const db = tx as unknown as { execute(q: unknown): Promise<unknown> };
                await settle(db.execute(sql`SELECT 1 / 0`));
                return 'swallowed';
              }),
            );
            seen.push(outcome);
          }
          return { done: true };
        },
      });
      const engine = await target.engine();
      engineRef.current = engine;
      await startWorker(engine, [nester, healthy]);
      const nested = await engine.client.enqueue(nester, { mode: 'nested' });
      await expect(nested.result({ timeoutMs: '20s' })).resolves.toEqual({ done: true });
      const aborted = await engine.client.enqueue(nester, { mode: 'aborted' });
      await expect(aborted.result({ timeoutMs: '20s' })).resolves.toEqual({ done: true });
      const [inner, swallowed] = seen.map((s) => (s as { error?: unknown }).error);
      expect(isPalisadeError(inner, 'FENCED_TRANSACTION_NESTED')).toBe(true);
      expect((inner as Error).message).toContain('fenced transactions do not nest');
      expect(isPalisadeError(swallowed, 'FENCED_TRANSACTION_ABORTED')).toBe(true);
      expect((swallowed as Error).message).toContain('25P02');
      // A heartbeat inside the transaction works on PostgreSQL (its own connection); on PGlite the transaction
      // holds the one connection, so it is refused rather than left to hang the engine.
      if (driver === 'postgres') {
        expect(heartbeatInside?.ok).toBe(true);
        expect(listInside?.ok).toBe(true);
      } else {
        expect(isPalisadeError(heartbeatInside?.error, 'FENCED_TRANSACTION_NESTED')).toBe(true);
        expect((heartbeatInside?.error as Error).message).toContain('ctx.heartbeat was called inside');
        expect(isPalisadeError(listInside?.error, 'FENCED_TRANSACTION_NESTED')).toBe(true);
        expect((listInside?.error as Error).message).toContain('client.list was called inside');
      }
      expect(await engine.client.list({ limit: 5 })).toHaveLength(2);
      const ok = await engine.client.enqueue(healthy, { n: 1 });
      await expect(ok.result({ timeoutMs: '20s' })).resolves.toEqual({ n: 2 });
    });

    it('fails a workflow run whose output or turn cannot be stored, once, and the run can be cancelled', async () => {
      const turnsOf = new Map<string, number>();
      const waiting = new Map<string, () => void>();
      const committedTurn = (runId: string) =>
        turnsOf.has(runId) ? Promise.resolve() : new Promise<void>((resolve) => waiting.set(runId, resolve));
      const unstorable = defineWorkflow({
        name: 'unstorable',
        input: z.object({ kind: z.enum(['output', 'date', 'step-input']) }),
        output: z.object({ s: z.unknown() }),
        async run({ kind }, ctx) {
          if (kind === 'output') return { s: 'a\u0000b' };
          if (kind === 'date') return { s: new Date(0) };
          await ctx.run(echo, { v: { n: 1n } });
          return { s: 'never' };
        },
      });
      const shifty = noInputWorkflow('shifty', z.unknown(), () => {
        // A value that passes the check at the door and changes before the commit serializes it (its third read
        // has a NUL): the database refuses the commit itself, which the turn loop must record, not replay.
        let reads = 0;
        const output = {};
        Object.defineProperty(output, 's', {
          enumerable: true,
          get: () => (++reads > 2 ? 'a\u0000' : 'ok'),
        });
        return Promise.resolve(output);
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [unstorable, shifty, echo, healthy]);
      worker.events.on('turn:committed', (e) => {
        turnsOf.set(e.runId, (turnsOf.get(e.runId) ?? 0) + 1);
        waiting.get(e.runId)?.();
      });
      await worker.start();
      const expected: [string, () => Promise<{ runId: string; result(o: object): Promise<unknown> }>][] = [
        ['s: contains a NUL', () => engine.client.start(unstorable, { kind: 'output' })],
        ['s: a Date would come back as a string', () => engine.client.start(unstorable, { kind: 'date' })],
        ['v.n: 1n is a BigInt', () => engine.client.start(unstorable, { kind: 'step-input' })],
        [
          'the database refused to store a turn of workflow shifty: [DATABASE_ERROR] 22P05',
          () => engine.client.start(shifty, {}),
        ],
      ];
      for (const [message, start] of expected) {
        const handle = await start();
        const outcome = await settle(handle.result({ timeoutMs: '20s' }));
        const error = (outcome as { error: Error }).error;
        expect(isPalisadeError(error, 'RUN_FAILED'), String(error)).toBe(true);
        expect(error.message).toContain(message);
        // The run ended failed (so no later turn can be claimed), in its first turn.
        await committedTurn(handle.runId);
        expect(turnsOf.get(handle.runId)).toBe(1);
        await expect(engine.client.getHandle(handle.runId).cancel()).resolves.toBe('failed');
      }
      const ok = await engine.client.enqueue(healthy, { n: 1 });
      await expect(ok.result({ timeoutMs: '20s' })).resolves.toEqual({ n: 2 });
    });

    it('refuses ctx.sleep(-1) and ctx.sleepUntil of a string inside the workflow that called them', async () => {
      const caught: unknown[] = [];
      const sleeper = noInputWorkflow('sleeper', z.object({}), async (ctx) => {
        for (const call of [() => ctx.sleep(-1), () => ctx.sleepUntil('2030-01-01' as unknown as Date)]) {
          try {
            await call();
          } catch (error) {
            caught.push(error);
          }
        }
        return {};
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [sleeper]);
      const committed = workerEvent(worker, 'turn:committed');
      await worker.start();
      const handle = await engine.client.start(sleeper, {});
      await expect(handle.result({ timeoutMs: '20s' })).resolves.toEqual({});
      await committed;
      expect(caught.map((e) => (isPalisadeError(e, 'INVALID_OPTIONS') ? e.message : String(e)))).toEqual([
        expect.stringContaining('ctx.sleep duration in workflow sleeper: -1 is not a duration'),
        expect.stringContaining('date: must be a valid Date, got the string "2030-01-01"'),
      ]);
    });
  });
}

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`work no worker serves, on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it('shows a workflow run and a ctx.run step that no worker claimed in describe().unclaimed, after the documented time', async () => {
      const orphan = emptyActivity('orphan', {
        queue: 'nobody',
        run: () => Promise.resolve({}),
      });
      const caller = oneStepWorkflow('caller', orphan);
      const unserved = defineWorkflow({
        name: 'unserved',
        input: z.object({}),
        output: z.object({}),
        queue: 'nobody',
        run: () => Promise.resolve({}),
      });
      const engine = await target.engine();
      const worker = workerFor(engine, [caller]);
      const blocked = workerEvent(worker, 'turn:committed');
      await worker.start();
      const calling = await engine.client.start(caller, {});
      expect((await blocked).outcome).toBe('blocked');
      const lonely = await engine.client.start(unserved, {});
      expect((await calling.describe()).unclaimed).toEqual([]);

      await advanceClock(engine, UNCLAIMED_AFTER_MS + 1_000);
      expect((await calling.describe()).unclaimed).toEqual([
        {
          kind: 'activity',
          name: 'orphan',
          queue: 'nobody',
          stepId: expect.any(String) as unknown,
          dueForMs: expect.any(Number) as unknown,
        },
      ]);
      const [waiting] = (await lonely.describe()).unclaimed;
      expect(waiting).toMatchObject({ kind: 'workflow', name: 'unserved', queue: 'nobody', stepId: null });
      expect(waiting?.dueForMs).toBeGreaterThanOrEqual(UNCLAIMED_AFTER_MS);
    });
  });
}
