import { sql } from 'drizzle-orm';
import type { Database } from './database.js';

/** The savepoint a bulk insert of runs opens inside a caller's transaction (nesting reuses the name safely). */
const NAME = sql.raw('palisade_insert_runs');

/**
 * Run `fn` inside a savepoint of the transaction `db` is in: released when `fn` resolves, rolled back to when it
 * throws, so that what `fn` wrote is undone while the transaction's earlier writes stay (and, on PostgreSQL, a
 * transaction that `fn`'s failed statement aborted can go on). `SAVEPOINT` takes no locks; `ROLLBACK TO` releases
 * the row locks taken since. Legal only inside a transaction block: the caller's (`{ tx }`).
 */
export async function inSavepoint<T>(db: Pick<Database, 'rows'>, fn: () => Promise<T>): Promise<T> {
  await db.rows(sql`SAVEPOINT ${NAME}`);
  let result: T;
  try {
    result = await fn();
  } catch (error) {
    await db.rows(sql`ROLLBACK TO SAVEPOINT ${NAME}`);
    await db.rows(sql`RELEASE SAVEPOINT ${NAME}`);
    throw error;
  }
  await db.rows(sql`RELEASE SAVEPOINT ${NAME}`);
  return result;
}
