/**
 * The database, not only the worker, refuses a zombie's fenced write: an attempt that passed its worker's last
 * local check and then stalled before the fence (fault point `fenced-transaction:before-fence`) while its lease
 * ended is refused by the fence statement itself; its writes roll back and the refusal is recorded.
 */
import { sql } from 'drizzle-orm';
import { afterEach, expect, it } from 'vitest';
import { z } from 'zod';
import { LeaseLostError } from '@palisade/sdk';
import { advanceClock, setFaultHook } from '@palisade/engine/testing';
import { useEngineTarget } from '../support/engine.js';
import { startWorker } from '../support/worker.js';
import { noInputActivity } from '../fixtures/no-input.js';

const target = useEngineTarget('postgres');

afterEach(() => setFaultHook('fenced-transaction:before-fence', undefined));

it("refuses in the database a fenced write whose lease ended after the worker's last local check", async () => {
  const engine = await target.engine();
  const ledger = sql.raw(`"${engine.schema}"."fence_ledger"`);
  await engine.database.rows(sql`CREATE TABLE ${ledger} (token bigint NOT NULL)`);
  const refusals: unknown[] = [];
  const write = noInputActivity('ledger-write', z.object({ token: z.string() }), async (ctx) => {
    try {
      await ctx.fencedTransaction(async (tx) => {
        await tx.execute(sql`INSERT INTO ${ledger} (token) VALUES (${ctx.info.fencing.tokenString}::bigint)`);
      });
    } catch (error) {
      refusals.push(error);
      throw error;
    }
    return { token: ctx.info.fencing.tokenString };
  });
  let stalledToken: bigint | undefined;
  setFaultHook('fenced-transaction:before-fence', async (attempt) => {
    setFaultHook('fenced-transaction:before-fence', undefined); // the first attempt only
    stalledToken = attempt.token;
    // The stall: by the database clock the lease runs out while the worker sits between its check and the fence.
    await advanceClock(engine, 120_000);
  });
  await startWorker(engine, [write]);
  const handle = await engine.client.enqueue(write, {});
  const { token } = await handle.result({ timeoutMs: 30_000 });

  expect(stalledToken).toBeDefined();
  expect(refusals).toHaveLength(1);
  const refused = refusals[0] as LeaseLostError;
  expect(refused).toBeInstanceOf(LeaseLostError);
  expect(refused.operation).toBe('fenced-transaction');
  expect(refused.staleToken).toBe(stalledToken);
  // The stalled attempt's insert rolled back; the next attempt's committed, under a higher token.
  const rows = await engine.database.rows<{ token: string }>(sql`SELECT token::text FROM ${ledger}`);
  expect(rows).toEqual([{ token }]);
  expect(BigInt(token)).toBeGreaterThan(stalledToken ?? 0n);
  const { events } = await handle.describe();
  expect(
    events
      .filter((e) => e.type === 'attempt:stale-rejected')
      .map((e) => [e.token, (e.data as { operation?: string }).operation]),
  ).toEqual([[String(stalledToken), 'fenced-transaction']]);
});
