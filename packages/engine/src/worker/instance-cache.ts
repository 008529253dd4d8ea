import type { RunHistoryNews } from '../queries/claim-turns.js';
import type { WorkflowInstance } from '../turn/contract.js';
import { monotonicNow } from './lease-clock.js';

/** A workflow instance kept after its turn committed, and the run as that turn's grant left it. */
export interface KeptInstance {
  readonly instance: WorkflowInstance;
  /** `runs.turn_epoch` of the turn that last ran (and committed) on this instance. */
  readonly turnEpoch: number;
  /** `runs.turn_attempt` and `wake_count` as that turn's grant left them (a fused step checks them). */
  readonly turnAttempt: number;
  readonly wakeCount: number;
  /** The run's workflow, queue and priority. */
  readonly workflowName: string;
  readonly queue: string;
  readonly priority: number;
  /**
   * A lower bound of the database clock: `dbNowMs` (epoch ms) was the database time no later than the local
   * monotonic time `atMonotonicMs`, so the database time at monotonic time t is at least
   * `dbNowMs + t - atMonotonicMs` (as long as the database clock does not go back).
   */
  readonly dbNowMs: number;
  readonly atMonotonicMs: number;
}

/**
 * Whether a claimed turn may continue `kept` instead of replaying in full. Conservative: every condition must hold,
 * and any doubt means a full replay (which is always right).
 * - `turnEpoch` is the kept one + 1: no other turn of the run was claimed since, by any worker (a claim is the
 *   only writer of `turn_epoch`, and every turn commit is fenced on its own claim);
 * - the claim read the run's history news (it is null when another worker ran the last turn, or when the claim's
 *   snapshot may not show every change the run row has seen);
 * - the history holds as many live steps and the same highest `delivered_seq` as the instance expects: a retry
 *   (which retires steps and withdraws deliveries), or any writer this worker did not foresee, forces a replay.
 *   Outcomes of steps the instance scheduled are the only other changes, and they are what `news.fresh` holds;
 * - the instance is continuable (its last turn blocked, its code did not run between turns).
 */
export function canContinue(
  kept: KeptInstance,
  claim: { readonly turnEpoch: number; readonly news: RunHistoryNews | null },
): boolean {
  const news = claim.news;
  if (news === null || claim.turnEpoch !== kept.turnEpoch + 1) return false;
  const expected = kept.instance.expected;
  return (
    news.live_steps === expected.liveSteps &&
    news.max_delivered_seq === expected.maxDeliveredSeq &&
    kept.instance.continuable
  );
}

/**
 * A turn waits for its run's instance to come back from another turn of this worker (see
 * {@link InstanceCache.takeWhenBack}) at most the turn lease divided by this: the rest of the lease is the turn's own.
 */
export const INSTANCE_WAIT_LEASE_FRACTION = 4;

/**
 * The workflow instances a worker keeps between turns, by run id, least recently used first; at most `capacity`
 * (0: none kept). An entry is taken out while its run's turn runs and put back only after that turn committed
 * blocked, so a turn that fails in any way leaves nothing behind. Dropping an entry needs no clean-up (see
 * {@link WorkflowInstance}).
 */
export class InstanceCache {
  private readonly entries = new Map<string, KeptInstance>();
  /** Runs whose instance is taken out for a turn in progress, with the promise that settles when it is back or gone. */
  private readonly out = new Map<string, { readonly back: Promise<void>; readonly settle: () => void }>();

  constructor(private readonly capacity: number) {}

  get size(): number {
    return this.entries.size;
  }

  /**
   * Remove and return the run's kept instance, if any. A taken instance is out until {@link put} puts it back or
   * {@link release} says it is gone; meanwhile {@link returned} lets the run's next turn wait for it.
   */
  take(runId: string): KeptInstance | undefined {
    const kept = this.entries.get(runId);
    if (!kept) return undefined;
    this.entries.delete(runId);
    let settle!: () => void;
    const back = new Promise<void>((resolve) => (settle = resolve));
    this.out.set(runId, { back, settle });
    return kept;
  }

  /**
   * While the run's instance is out for a turn of this worker, a promise that settles when that turn put it back
   * or dropped it; undefined otherwise. The run's next turn can be granted before the turn that holds the instance
   * has seen its own commit's reply (the commit is visible to the database, and its NOTIFY to this worker, first):
   * waiting here, a turn continues the instance instead of replaying the whole history. The wait is short, as the
   * holder is a turn in progress, and never on this turn (turns of one run commit one after another, fenced).
   */
  returned(runId: string): Promise<void> | undefined {
    return this.out.get(runId)?.back;
  }

  /**
   * Wait while the run's instance is out for another turn of this worker (see {@link returned}), at most `maxWaitMs`
   * in all: a holder that has not put it back by then (a commit stalled on the database, a turn past its lease) is
   * left behind, and the caller goes on without the instance (a full replay, which is correct). Then, in the same
   * tick the wait ended, take it if `wanted(kept)` — so that no other turn of this worker takes it in between. A check and a take split by an `await` lose that race whenever two turns of one run wait
   * together (parallel steps of a run completing at once on this worker): the second would find the instance out
   * again and go on without it, and the run's next turn would replay in full.
   * @returns the taken instance; undefined when none is kept, `wanted` refused it (it stays kept), the wait ran
   *   out, or `stillWanted()` turned false after a wake.
   */
  async takeWhenBack(
    runId: string,
    maxWaitMs: number,
    o: { stillWanted?: () => boolean; wanted?: (kept: KeptInstance) => boolean } = {},
  ): Promise<KeptInstance | undefined> {
    const deadline = monotonicNow() + maxWaitMs;
    for (let back = this.returned(runId); back; back = this.returned(runId)) {
      const left = deadline - monotonicNow();
      if (left <= 0) return undefined;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timedOut = new Promise<'timeout'>(
        (resolve) => (timer = setTimeout(() => resolve('timeout'), left)),
      );
      const woke = await Promise.race([back.then(() => 'back' as const), timedOut]);
      clearTimeout(timer);
      if (woke === 'timeout' || !(o.stillWanted?.() ?? true)) return undefined;
    }
    // No await from the loop's last check to here: the instance is not out, and nothing else ran meanwhile.
    const kept = this.entries.get(runId);
    if (!kept || (o.wanted && !o.wanted(kept))) return undefined;
    return this.take(runId);
  }

  /** Say that the run's taken instance is gone, unless {@link put} already put it back: its waiters go on. */
  release(runId: string): void {
    const out = this.out.get(runId);
    this.out.delete(runId);
    out?.settle();
  }

  /**
   * Keep `kept` for `runId` as the most recently used, dropping the least recently used beyond capacity. (An entry
   * is taken out when its run's turn is claimed, and only a turn whose fenced commit succeeded puts one back, so
   * two turns of one run never compete here.)
   */
  put(runId: string, kept: KeptInstance): void {
    if (this.capacity === 0) return this.release(runId);
    this.entries.delete(runId);
    this.entries.set(runId, kept);
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
    this.release(runId);
  }

  clear(): void {
    this.entries.clear();
    for (const runId of [...this.out.keys()]) this.release(runId);
  }
}
