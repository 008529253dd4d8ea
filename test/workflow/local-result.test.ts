/**
 * A `handle.result()` waiting in the process whose worker ran the run's last turn is answered from that turn's
 * commit (issue 12: result waiters served without a NOTIFY and a read per run): the statement that ended the run
 * returns the run's end as stored, and the waiter settles on it without reading the run again. A waiter whose run
 * has a turn in progress in its own process waits for that turn before it registers on the run.
 */
import { z } from 'zod';
import { describe, expect, it } from 'vitest';
import postgres from '@palisade/engine/postgres';
import { defineWorkflow, RunFailedError } from '@palisade/sdk';
import { createEngine, type Engine } from '@palisade/engine';
import { useEngineTarget, type EngineTarget } from '../support/engine.js';
import { holdActivity } from '../core/held-activity.js';
import { gate } from '../worker/helpers.js';

const held = holdActivity('held');
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
    await ctx.run(held.activity, {});
    if (fail) throw new Error('asked to fail');
    return { bb: 1, a: 2 };
  },
});

/** A statement a waiter sends about its run: the registration (upsertWatcher) or a read (readRunForWaiter). */
const isWaiterStatement = (query: string) =>
  query.includes('"run_watchers" (id, run_id, turns, expires_at)') ||
  /^\s*SELECT r\.id::text, r\.kind, r\.name, /.test(query);

/**
 * Run `body` on an engine whose postgres.js client logs every statement it sends, in order, into `sent`; `onSent`
 * sees each as it goes.
 */
async function withStatementLog(
  target: EngineTarget,
  body: (engine: Engine, sent: string[]) => Promise<void>,
  onSent: (sent: readonly string[]) => void = () => undefined,
): Promise<void> {
  const sent: string[] = [];
  const client = postgres(target.url(), {
    max: 4,
    onnotice: () => undefined,
    debug: (_connection, query) => {
      sent.push(query);
      onSent(sent);
    },
  });
  try {
    const engine = await createEngine({ sql: client, schema: `local_${Date.now()}` });
    try {
      await body(engine, sent);
    } finally {
      await engine.close();
    }
  } finally {
    await client.end({ timeout: 1 });
  }
}

describe('results answered by the turn that ended the run', () => {
  const target = useEngineTarget('postgres');

  it('settles a waiter from the ending turn’s commit, with the output as stored, sending nothing after', async () => {
    // Both waiters have registered on their runs (still running) before the activity may end.
    const registered = gate();
    const onSent = (sent: readonly string[]) => {
      if (sent.filter(isWaiterStatement).length === 2) registered.open();
    };
    await withStatementLog(
      target,
      async (engine, sent) => {
        const worker = engine.worker({ activities: [held.activity], workflows: [unordered] });
        worker.events.on('turn:committed', (e) => {
          if (e.outcome !== 'blocked') sent.push('-- the run ended');
        });
        await worker.start();
        const ok = await engine.client.start(unordered, { fail: false });
        const bad = await engine.client.start(unordered, { fail: true });
        const okResult = ok.result({ timeoutMs: 20_000 });
        const badRefused = expect(bad.result({ timeoutMs: 20_000 })).rejects.toBeInstanceOf(RunFailedError);
        await registered.promise;
        for (const attempt of [await held.next(), await held.next()]) attempt.complete();
        const output = await okResult;
        await badRefused;
        // jsonb keeps keys shortest first: what the waiter got is the stored value, not the one the code returned.
        expect(Object.keys(output ?? {})).toEqual(['a', 'bb']);
        expect(sent).toContain('-- the run ended');
        expect(sent.slice(sent.indexOf('-- the run ended')).filter(isWaiterStatement)).toEqual([]);
        expect(output).toEqual((await ok.describe()).run.output);
        await worker.stop();
      },
      onSent,
    );
  });

  it('answers the waiter of a run its eager first turn ends with no statement of its own', async () => {
    await withStatementLog(target, async (engine, sent) => {
      const worker = engine.worker({ workflows: [instant] });
      await worker.start();
      // The engine's LISTEN is up after a first wait.
      await (await engine.client.start(instant, {})).result({ timeoutMs: 20_000 });
      // start() granted the first turn to the worker (eager start), which runs it while result() waits for it.
      const handle = await engine.client.start(instant, {});
      const from = sent.length;
      await expect(handle.result({ timeoutMs: 20_000 })).resolves.toEqual({ ok: true });
      expect(sent.slice(from).filter(isWaiterStatement)).toEqual([]);
      await worker.stop();
    });
  });
});
