/**
 * Everything a user may log is JSON-serialisable: `ctx.info` (the fencing token also as a decimal string), run
 * handles, their descriptions and lists, and errors with their context and cause.
 */
import { expect, it } from 'vitest';
import { z } from 'zod';
import {
  ApplicationFailure,
  LeaseLostError,
  PalisadeError,
  RunFailedError,
  defineActivity,
  defineWorkflow,
  type ActivityInfo,
} from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';

const target = useEngineTarget('postgres');

it('serialises ctx.info with the fencing token as a decimal string, and keeps the bigint for code', async () => {
  let seen: ActivityInfo | undefined;
  const probe = defineActivity({
    name: 'probe',
    input: z.object({}),
    output: z.object({ info: z.string() }),
    run: (_input, ctx) => {
      seen = ctx.info;
      return Promise.resolve({ info: JSON.stringify(ctx.info) });
    },
  });
  const engine = await target.engine();
  const worker = engine.worker({ activities: [probe] });
  await worker.start();
  const handle = await engine.client.enqueue(probe, {});
  const { info } = await handle.result({ timeoutMs: 15_000 });
  expect(typeof seen?.fencing.token).toBe('bigint');
  expect(seen?.fencing.tokenString).toBe(seen?.fencing.token.toString());
  const parsed = JSON.parse(info) as Record<string, unknown>;
  expect(parsed).toMatchObject({
    runId: handle.runId,
    activityName: 'probe',
    attempt: 1,
    epoch: 1,
    fencing: { scope: `run:${handle.runId}`, token: seen?.fencing.token.toString() },
  });
});

it('serialises a handle, its description and run lists', async () => {
  const step = defineActivity({
    name: 'step',
    input: z.number(),
    output: z.number(),
    run: (n) => Promise.resolve(n + 1),
  });
  const flow = defineWorkflow({
    name: 'flow',
    input: z.number(),
    output: z.number(),
    run: (n, ctx) => ctx.run(step, n),
  });
  const engine = await target.engine();
  const worker = engine.worker({ workflows: [flow], activities: [step] });
  await worker.start();
  const handle = await engine.client.start(flow, 1, { key: 'json-1' });
  await expect(handle.result({ timeoutMs: 15_000 })).resolves.toBe(2);
  expect(JSON.parse(JSON.stringify(handle))).toEqual({ runId: handle.runId, created: true });
  const description = await handle.describe();
  const round = JSON.parse(JSON.stringify(description)) as {
    run: { id: string };
    steps: { attempts: unknown[] }[];
  };
  expect(round.run.id).toBe(handle.runId);
  expect(round.steps[0]?.attempts).toHaveLength(1);
  expect(() => JSON.stringify(description)).not.toThrow();
  expect(JSON.parse(JSON.stringify(await engine.client.list()))).toHaveLength(1);
});

it('serialises errors with their code, context (bigints as decimal strings) and cause', () => {
  const lost = new LeaseLostError({
    operation: 'complete',
    stepLabel: 'charge#3',
    attempt: 1,
    runId: 'r1',
    stepId: 's1',
    staleToken: 9_007_199_254_740_993n,
    currentToken: 9_007_199_254_740_995n,
    reason: 'superseded',
  });
  expect(JSON.parse(JSON.stringify(lost))).toMatchObject({
    name: 'LeaseLostError',
    code: 'LEASE_LOST',
    runId: 'r1',
    stepId: 's1',
    token: '9007199254740993',
    staleToken: '9007199254740993',
    currentToken: '9007199254740995',
    reason: 'superseded',
  });
  const wrapped = new PalisadeError('DATABASE_UNAVAILABLE', 'cannot reach', {
    cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }),
    token: 5n,
  });
  expect(JSON.parse(JSON.stringify(wrapped))).toEqual({
    name: 'PalisadeError',
    code: 'DATABASE_UNAVAILABLE',
    message: '[DATABASE_UNAVAILABLE] cannot reach',
    token: '5',
    cause: { name: 'Error', code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' },
  });
  const failed = new RunFailedError('r2', {
    type: 'Declined',
    message: 'card declined',
    nonRetryable: true,
  });
  expect(() => JSON.stringify(failed)).not.toThrow();
  expect(
    JSON.parse(JSON.stringify(ApplicationFailure.nonRetryable('no', 'Declined', { amount: 1n }))),
  ).toMatchObject({
    code: 'APPLICATION_FAILURE',
  });
});
