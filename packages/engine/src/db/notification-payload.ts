/**
 * The payload of the engine's wake-up NOTIFY, decoded. The statements under `queries/` encode it
 * (`queries/notify.ts`); the LISTEN side here in `db/` decodes it.
 * @module
 */

/**
 * Wake-ups travel on one channel per schema as NOTIFY payloads made of items, one per line:
 * - `step:<queue>`: an activity step of that queue may be claimable;
 * - `turn:<queue>`: a workflow turn of that queue may be due;
 * - `run:<id>`: that run ended (for `handle.result()` waiters); `run:*`: some runs ended, too many to name.
 * A statement sends at most one NOTIFY (`notifyOnce` in `queries/notify.ts`): PostgreSQL queues every NOTIFY of
 * a transaction under one global lock held until COMMIT, so one per run or per queue would serialize the commits
 * of every worker behind it.
 */
export function notificationItems(payload: string): string[] {
  return payload.split('\n');
}
