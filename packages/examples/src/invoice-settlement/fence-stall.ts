/**
 * The demo's second fault, after the batch: the *database* refusing a zombie's fenced write. The stalled invoice
 * of the main run shows the worker's own refusal (its local lease deadline passed, so the engine refused the
 * write without sending SQL). Here an attempt passes its worker's last local check and then stalls just before
 * the fence statement (the engine's fault point `fenced-transaction:before-fence`, as a GC pause or a slow
 * network would); meanwhile its lease runs out by the database clock. The fence statement, the last one of its
 * transaction, then matches nothing: the database refuses the write, rolls back the attempt's own rows and
 * records the stale rejection, and the next attempt writes the note under a higher token.
 *
 * On PostgreSQL only. Waiting out a 4 s lease inside an open transaction would trip the transaction's idle timeout
 * (a safety net of its own), so the demo moves the database clock forward instead (the engine's time travel), and
 * back afterwards.
 */
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { LeaseLostError, defineActivity } from '@palisade/sdk';
import type { Engine } from '@palisade/engine';
import { advanceClock, resetClock, setFaultHook } from '@palisade/engine/testing';
import type { AppDatabase } from './app-database.js';
import type { DemoCheck } from './checks.js';
import type { Timeline } from './timeline.js';

/** `"name"` quoted as a SQL identifier. */
function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/** What the database did with the stalled attempt's write, and the check built from it. */
export interface FenceStallOutcome {
  readonly check: DemoCheck;
  readonly runId: string | undefined;
}

/**
 * Enqueue one `settlement-note` job for `batchId` on `engine` (served by a worker of its own), stall its first
 * attempt between the last local check and the fence, and report whether the database refused that write.
 */
export async function demonstrateDatabaseFence(options: {
  readonly engine: Engine;
  readonly app: AppDatabase;
  readonly appSchema: string;
  readonly batchId: string;
  readonly leaseMs: number;
  readonly timeline: Timeline;
}): Promise<FenceStallOutcome | undefined> {
  const { engine, timeline } = options;
  if (engine.database.driver === 'pglite') {
    // PGlite is one connection, held by the stalled transaction: nothing can move its clock meanwhile, and a stall
    // that outlasts the lease there does not end (the attempt's local-deadline abort waits on that connection).
    timeline.line(
      'note',
      "the database's fence refusing a zombie's write is shown on PostgreSQL (DATABASE_URL)",
    );
    return undefined;
  }
  const notes = `${quoteIdent(options.appSchema)}.settlement_notes`;
  await options.app.run([
    `CREATE TABLE IF NOT EXISTS ${notes} (batch_id text NOT NULL, fencing_token bigint NOT NULL, worker_id text NOT NULL)`,
  ]);
  const refused: LeaseLostError[] = [];
  const note = defineActivity({
    name: 'invoice-settlement.settlement-note',
    input: z.object({ batchId: z.string() }),
    output: z.object({ token: z.string() }),
    leaseMs: options.leaseMs,
    async run({ batchId }, ctx) {
      try {
        await ctx.fencedTransaction(async (tx) => {
          await tx.execute(
            sql`INSERT INTO ${sql.raw(notes)} (batch_id, fencing_token, worker_id)
                VALUES (${batchId}, ${ctx.info.fencing.tokenString}::bigint, ${ctx.info.workerId})`,
          );
        });
      } catch (error) {
        if (error instanceof LeaseLostError) refused.push(error);
        throw error;
      }
      timeline.line(
        ctx.info.workerId,
        `settlement note for ${batchId} written with token ${ctx.info.fencing.token}`,
      );
      return { token: ctx.info.fencing.tokenString };
    },
  });
  let stalled: bigint | undefined;
  setFaultHook('fenced-transaction:before-fence', async (attempt) => {
    setFaultHook('fenced-transaction:before-fence', undefined); // the first attempt only
    stalled = attempt.token;
    timeline.line(
      'FAULT',
      `note-writer stalls on ${attempt.stepLabel} (token ${attempt.token}) AFTER its last local check, just before ` +
        'the fence statement; meanwhile its lease runs out by the database clock (moved forward)',
    );
    await advanceClock(engine, options.leaseMs + 1_000);
  });
  const worker = engine.worker({ workerId: 'note-writer', activities: [note], concurrency: 2 });
  let runId: string | undefined;
  try {
    await worker.start();
    const handle = await engine.client.enqueue(
      note,
      { batchId: options.batchId },
      { key: `${options.batchId}:note` },
    );
    runId = handle.runId;
    const { token } = await handle.result({ timeoutMs: 60_000 });
    const first = refused[0];
    const { events } = await handle.describe();
    const recorded = events.find((e) => e.type === 'attempt:stale-rejected' && e.token === String(stalled));
    const [rows] = await engine.database.rows<{ n: number; token: string | null }>(
      sql`SELECT count(*)::int AS n, max(fencing_token)::text AS token FROM ${sql.raw(notes)}
           WHERE batch_id = ${options.batchId}`,
    );
    if (first) {
      timeline.line(
        'database',
        `REFUSED note-writer's fenced write (token ${first.staleToken}, ${first.reason}): the fence matched nothing, ` +
          'its rows rolled back, attempt:stale-rejected recorded',
      );
    }
    const ok =
      stalled !== undefined &&
      first?.operation === 'fenced-transaction' &&
      first.staleToken === stalled &&
      recorded !== undefined &&
      rows?.n === 1 &&
      rows.token === token;
    return {
      runId,
      check: {
        name: "the database's fence refused a write that passed the worker's last local check",
        ok,
        detail: ok
          ? `token ${stalled} refused by the fence (${first.reason}), recorded; the note was written once, by token ${token}`
          : `stalled token ${String(stalled)}, refusal ${first ? `${first.operation} ${first.staleToken}` : 'none'}, ` +
            `recorded ${recorded ? 'yes' : 'no'}, note rows ${rows?.n ?? 0}`,
      },
    };
  } finally {
    setFaultHook('fenced-transaction:before-fence', undefined);
    await worker.stop({ graceMs: 0 });
    await resetClock(engine);
  }
}
