/**
 * The insertion of a start's or an enqueue's runs: in statements of at most `BULK_START_LIMITS`, all-or-nothing,
 * retried whole on a transient error (or, in the caller's transaction, in a savepoint and never retried).
 * @module
 */
import type { Database } from '../db/database.js';
import type { CallerTransaction } from '../db/caller-transaction.js';
import { withInfraRetry } from '../infra-retry.js';
import { faultHooks } from '../internal/fault-points.js';
import { inSavepoint } from '../db/savepoint.js';
import type { RunInsertOutcome, RunItem } from '../queries/run-by-key.js';
import { keyConflict, statementChunks } from './run-items.js';
import type { OnKeyConflict } from './start-options.js';

/** One statement inserting `chunk`'s runs through `db`, with what became of each. */
export type RunInserter = (
  db: Pick<Database, 'rows'>,
  chunk: readonly RunItem[],
) => Promise<RunInsertOutcome[]>;

/**
 * Insert `items` in statements of at most {@link BULK_START_LIMITS} and return their outcomes in order. A
 * key that names a run with a different input is RUN_KEY_CONFLICT unless `onConflict` is `'use-existing'`.
 *
 * The call is all-or-nothing: a call of several statements runs them in one transaction, and so does one
 * statement of several runs with some key (the conflict is known only once the statement ran: the run holding
 * the key may have committed while it waited on the key), so that a refusal (or any error) leaves nothing of the
 * call written and a blind retry of the call cannot start its keyless runs twice. One run alone, or one statement
 * without keys, needs none: a refused run is not inserted, and without keys nothing can be refused. The
 * transaction (or the lone statement) is retried as a whole on a transient error: idempotent, the ids were fixed
 * before the first try.
 *
 * With `call.tx` (the caller's transaction) every statement runs in it, and nothing is retried: on PostgreSQL a
 * failed statement has aborted the caller's transaction, so a retry could only fail again (the caller retries
 * the transaction whole). What would be a transaction of its own is a savepoint in it, so that a refusal undoes
 * the call's runs and nothing else of the caller's.
 */
export async function insertRuns(
  db: Database,
  items: readonly RunItem[],
  onConflict: OnKeyConflict | undefined,
  insert: RunInserter,
  call: { what: string; many: boolean; tx: CallerTransaction | undefined },
): Promise<RunInsertOutcome[]> {
  const chunks = statementChunks(items);
  const insertAll = async (db: Pick<Database, 'rows'>): Promise<RunInsertOutcome[]> => {
    const outcomes: RunInsertOutcome[] = [];
    for (const chunk of chunks) {
      const from = outcomes.length;
      const inserted = await insert(db, chunk);
      const refused = onConflict === 'use-existing' ? -1 : inserted.findIndex((o) => !o.sameInput);
      const outcome = inserted[refused];
      if (outcome) {
        throw keyConflict(call, items, outcome, {
          index: from + refused,
          leadIndex: from + outcome.leadIndex,
        });
      }
      outcomes.push(...inserted);
    }
    return outcomes;
  };
  const atomic =
    chunks.length > 1 ||
    (items.length > 1 && onConflict !== 'use-existing' && items.some((i) => i.idempotencyKey !== null));
  const tx = call.tx;
  return tx
    ? atomic
      ? await inSavepoint(tx, () => insertAll(tx))
      : await insertAll(tx)
    : await withInfraRetry(async () => {
        const inserted = atomic ? await db.transaction(insertAll) : await insertAll(db);
        await faultHooks['client:after-insert-run']?.(inserted[0]?.runId ?? '');
        return inserted;
      });
}
