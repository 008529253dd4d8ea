/**
 * The engine sends its statements as named prepared statements on postgres.js (issue 12: no parse and plan per
 * call, one round trip per statement), and honours a client created with `prepare: false` — what a transaction
 * pooler (PgBouncer in transaction mode) needs — by sending them unnamed instead.
 */
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import postgres from '@palisade/engine/postgres';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import { createEngine, type Engine } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';

const add = defineActivity({
  name: 'add',
  input: z.object({ a: z.number(), b: z.number() }),
  output: z.number(),
  run: ({ a, b }) => Promise.resolve(a + b),
});
const sum = defineWorkflow({
  name: 'sum',
  input: z.array(z.number()),
  output: z.number(),
  async run(values, ctx) {
    let total = 0;
    for (const v of values) total = await ctx.run(add, { a: total, b: v });
    return total;
  },
});

/** Runs jobs and a workflow to the end on `engine`. */
async function exercise(engine: Engine): Promise<void> {
  const worker = engine.worker({ activities: [add], workflows: [sum], concurrency: 4 });
  await worker.start();
  const jobs = await Promise.all(
    Array.from({ length: 20 }, (_, k) => engine.client.enqueue(add, { a: k, b: 1 })),
  );
  expect(await Promise.all(jobs.map((h) => h.result({ timeoutMs: 20_000 })))).toEqual(
    Array.from({ length: 20 }, (_, k) => k + 1),
  );
  expect(await (await engine.client.start(sum, [1, 2, 3, 4])).result({ timeoutMs: 20_000 })).toBe(10);
  await worker.stop();
}

describe('prepared statements on postgres.js', () => {
  const target = useEngineTarget('postgres');

  it('prepares the engine statements on its own connections', async () => {
    const client = postgres(target.url(), { max: 2, onnotice: () => undefined });
    try {
      const engine = await createEngine({ sql: client, schema: `prep_${Date.now()}` });
      try {
        await exercise(engine);
        // pg_prepared_statements shows one session's: ask on both connections of the client at once.
        const prepared = await Promise.all(
          [0, 1].map(() =>
            client.reserve().then(async (c) => {
              try {
                return await c<{ statement: string }[]>`SELECT statement FROM pg_prepared_statements`;
              } finally {
                c.release();
              }
            }),
          ),
        );
        const texts = prepared.flat().map((r) => r.statement);
        expect(texts.some((t) => t.includes('reclaimed_from_token'))).toBe(true); // the claim
        expect(texts.some((t) => t.includes("SET status = 'completed', output = "))).toBe(true); // the completion
      } finally {
        await engine.close();
      }
    } finally {
      await client.end({ timeout: 1 });
    }
  });

  it('runs everything on a client created with prepare: false (a transaction pooler), preparing nothing', async () => {
    const client = postgres(target.url(), { max: 2, prepare: false, onnotice: () => undefined });
    try {
      const engine = await createEngine({ sql: client, schema: `noprep_${Date.now()}` });
      try {
        await exercise(engine);
        const c = await client.reserve();
        try {
          const rows = await c<{ n: number }[]>`SELECT count(*)::int AS n FROM pg_prepared_statements`;
          expect(rows[0]?.n).toBe(0);
        } finally {
          c.release();
        }
      } finally {
        await engine.close();
      }
    } finally {
      await client.end({ timeout: 1 });
    }
  });
});
