/**
 * A `handle.result()` waiting in the process whose worker ran the run's last turn is answered from that turn's
 * commit (issue 12: result waiters served without a NOTIFY and a read per run): the statement that ended the run
 * returns the run's end as stored, and the waiter settles on it without reading the run again.
 */
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import postgres from '@palisade/engine/postgres';
import { defineActivity, defineWorkflow, RunFailedError } from '@palisade/sdk';
import { createEngine } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { gate } from '../worker/helpers.js';

const released = gate();
const held = defineActivity({
  name: 'held',
  input: z.object({}),
  output: z.object({}),
  run: async () => {
    await released.promise;
    return {};
  },
});
const instant = defineWorkflow({
  name: 'instant',
  input: z.object({}),
  output: z.object({ ok: z.boolean() }),
  run: () => Promise.resolve({ ok: true }),
});
const unordered = defineWorkflow({
  name: 'unordered',
  input: z.object({ fail: z.boolean() }),
  output: z.object({ bb: z.number(), a: z.number() }),
  async run({ fail }, ctx) {
    await ctx.run(held, {});
    if (fail) throw new Error('asked to fail');
    return { bb: 1, a: 2 };
  },
});

/** A read of one run (queries/read-run.ts), as `handle.result()` sends it. */
const isRunRead = (query: string) => /FROM "[^"]+"\."runs"\s+WHERE id = /.test(query);

describe('results answered by the turn that ended the run', () => {
  const target = useEngineTarget('postgres');

  it('settles a waiter from the ending turn’s commit, with the output as stored, reading nothing after', async () => {
    // Every statement this engine sends, in order, with the moment the run's last turn committed marked.
    const sent: string[] = [];
    const readsSent = gate();
    const client = postgres(target.url(), {
      max: 4,
      onnotice: () => undefined,
      debug: (_connection, query) => {
        sent.push(query);
        if (sent.filter(isRunRead).length === 2) readsSent.open();
      },
    });
    try {
      const engine = await createEngine({ sql: client, schema: `local_${Date.now()}` });
      try {
        const worker = engine.worker({ activities: [held], workflows: [unordered] });
        worker.events.on('turn:committed', (e) => {
          if (e.outcome !== 'blocked') sent.push('-- the run ended');
        });
        await worker.start();
        const ok = await engine.client.start(unordered, { fail: false });
        const bad = await engine.client.start(unordered, { fail: true });
        const okResult = ok.result({ timeoutMs: 20_000 });
        const badRefused = expect(bad.result({ timeoutMs: 20_000 })).rejects.toBeInstanceOf(RunFailedError);
        // Both waiters have read their run (still running) before the activity may end.
        await readsSent.promise;
        released.open();
        const output = await okResult;
        await badRefused;
        // jsonb keeps keys shortest first: what the waiter got is the stored value, not the one the code returned.
        expect(Object.keys(output ?? {})).toEqual(['a', 'bb']);
        expect(sent).toContain('-- the run ended');
        expect(sent.slice(sent.indexOf('-- the run ended')).filter(isRunRead)).toEqual([]);
        expect(output).toEqual((await ok.describe()).run.output);
        await worker.stop();
      } finally {
        await engine.close();
      }
    } finally {
      await client.end({ timeout: 1 });
    }
  });

  it('answers the waiter of a run its eager first turn ends with no statement of its own', async () => {
    const sent: string[] = [];
    const client = postgres(target.url(), {
      max: 4,
      onnotice: () => undefined,
      debug: (_connection, query) => sent.push(query),
    });
    try {
      const engine = await createEngine({ sql: client, schema: `local_${Date.now()}` });
      try {
        const worker = engine.worker({ workflows: [instant] });
        await worker.start();
        // The engine's LISTEN is up after a first wait.
        await (await engine.client.start(instant, {})).result({ timeoutMs: 20_000 });
        // start() granted the first turn to the worker (eager start), which runs it while result() waits for it.
        const handle = await engine.client.start(instant, {});
        const from = sent.length;
        await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ ok: true });
        const own = sent.slice(from).filter((q) => isRunRead(q) || q.includes('SET result_waiters'));
        expect(own).toEqual([]);
        await worker.stop();
      } finally {
        await engine.close();
      }
    } finally {
      await client.end({ timeout: 1 });
    }
  });
});
