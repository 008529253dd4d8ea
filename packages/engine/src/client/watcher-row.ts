import type { Database } from '../db/database.js';
import { withInfraRetry } from '../infra-retry.js';
import { WATCHER_TTL_MS, deleteWatcher, upsertWatcher } from '../queries/run-watchers.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { uuid7 } from '../turn/uuid7.js';

/**
 * A `run_watchers` row of one result()/watch() call: inserted by its first read, pushed forward while it waits,
 * deleted when it returns (a call that dies lets it lapse: see run-watchers.ts).
 */
export class WatcherRow {
  private readonly id = uuid7();
  private held = false;
  private refreshedAt = -Infinity;

  constructor(
    private readonly db: Database,
    private readonly names: SchemaNames,
    private readonly runId: string,
    private readonly turns: boolean,
  ) {}

  /** Insert the row, or push it forward when half its life has passed; nothing when the run ended or is unknown. */
  async keep(): Promise<void> {
    if (performance.now() - this.refreshedAt < WATCHER_TTL_MS / 2) return;
    const at = performance.now();
    // Idempotent: retried after a lost reply, it leaves one row.
    const kept = await withInfraRetry(() =>
      upsertWatcher(this.db, this.names, { id: this.id, runId: this.runId, turns: this.turns }),
    );
    this.held ||= kept;
    this.refreshedAt = at;
  }

  /** Delete the row. A failure (the engine closing, a lost connection) only lets it lapse. */
  async drop(): Promise<void> {
    if (!this.held) return;
    this.held = false;
    await deleteWatcher(this.db, this.names, this.id).catch(() => undefined);
  }
}
