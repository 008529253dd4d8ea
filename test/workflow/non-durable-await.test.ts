import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity, RunFailedError } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { startWorker } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { runOf, stepsOf } from './workflow-rows.js';

// Every response closes its connection: a fetch that reused a pooled one (left by the test before) would start a
// Timeout before any socket, and the failure would name that instead of the TCPWRAP of a new connection.
const server = createServer((_req, res) => {
  res.setHeader('connection', 'close');
  res.end('pong');
});
let baseUrl = '';
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

const executions: string[] = [];
const step = defineActivity({
  name: 'step',
  input: z.string(),
  output: z.string(),
  run: (s) => {
    executions.push(s);
    return Promise.resolve(s);
  },
});

const napsOnATimer = noInputWorkflow('naps-on-a-timer', z.string(), async (ctx) => {
  await ctx.run(step, 'before');
  await new Promise((resolve) => setTimeout(resolve, 10));
  return ctx.run(step, 'after');
});

const fetchesInline = noInputWorkflow('fetches-inline', z.string(), async (ctx) => {
  await ctx.run(step, 'before');
  const res = await fetch(`${baseUrl}/ping`);
  return ctx.run(step, await res.text());
});

const wellBehaved = noInputWorkflow('well-behaved', z.string(), async (ctx) => ctx.run(step, 'fine'));

for (const driver of ['postgres', 'pglite'] as const) {
  describe(`non-durable awaits in workflow code on ${driver}`, () => {
    const target = useEngineTarget(driver, { warm: true });

    it.each([
      { workflow: napsOnATimer, resource: 'Timeout' },
      { workflow: fetchesInline, resource: 'TCPWRAP' },
    ])('fails $workflow.name with NON_DURABLE_AWAIT naming the workflow', async ({ workflow, resource }) => {
      executions.length = 0;
      const engine = await target.engine();
      await startWorker(engine, [workflow, wellBehaved, step], { pollIntervalMs: 50 });
      const handle = await engine.client.start(workflow, {});
      const good = await engine.client.start(wellBehaved, {});
      const error = await handle.result({ timeoutMs: 15_000 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RunFailedError);
      const { failure } = error as RunFailedError;
      expect(failure.code).toBe('NON_DURABLE_AWAIT');
      expect(failure.message).toContain(`workflow ${workflow.name} started a ${resource}`);
      expect(failure.message).toContain('move the work into an activity');
      expect((await runOf(engine, handle.runId)).error?.code).toBe('NON_DURABLE_AWAIT');
      // The turn that misbehaved recorded nothing: the step after the non-durable await never existed.
      expect((await stepsOf(engine, handle.runId)).map((s) => [s.name, s.status])).toEqual([
        ['step', 'completed'],
      ]);
      // The same worker goes on running other workflows.
      await expect(good.result({ timeoutMs: 15_000 })).resolves.toBe('fine');
      expect(executions.sort()).toEqual(['before', 'fine']);
    });
  });
}
