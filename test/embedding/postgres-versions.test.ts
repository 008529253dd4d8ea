/**
 * `createEngine({ sql })` takes a postgres.js client of either supported major version, 3.x (the engine's own) and
 * 4.x (installed here as `postgres4`): it type-checks (this file is in the test package's typecheck) and runs a
 * job start to end on it, with a worker whose heartbeat client is made from the given client's options.
 */
import postgres3 from '@palisade/engine/postgres';
import postgres4 from 'postgres4';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { createEngine, type Engine } from '@palisade/engine';
import { useTestDatabase } from '../support/postgres.js';

const double = defineActivity({
  name: 'double',
  input: z.object({ n: z.number() }),
  output: z.object({ n: z.number() }),
  run: ({ n }) => Promise.resolve({ n: n * 2 }),
});

const url = useTestDatabase();
const opened: { engine?: Engine; end: () => Promise<void> }[] = [];
afterEach(async () => {
  for (const o of opened.splice(0)) {
    await o.engine?.close({ graceMs: 0 });
    await o.end();
  }
});

describe.each([
  ['3.x', () => postgres3(url(), { max: 4, onnotice: () => undefined })],
  ['4.x', () => postgres4(url(), { max: 4, onnotice: () => undefined })],
] as const)('createEngine({ sql }) with postgres.js %s', (version, connect) => {
  it('migrates, starts a job and a worker runs it to its result', async () => {
    const sql = connect();
    const entry: { engine?: Engine; end: () => Promise<void> } = { end: () => sql.end({ timeout: 1 }) };
    opened.push(entry);
    const engine = await createEngine({ sql, schema: `driver_${version.replace('.x', '')}` });
    entry.engine = engine;
    const worker = engine.worker({ activities: [double], pollIntervalMs: 50 });
    await worker.start();
    const job = await engine.client.enqueue(double, { n: 21 });
    await expect(job.result({ timeoutMs: 20_000 })).resolves.toEqual({ n: 42 });
    await worker.stop();
  });
});
