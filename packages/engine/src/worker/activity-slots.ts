import type { ClaimedStepRow } from '../queries/claim-steps.js';
import type { ActivityAttempt } from './activity-attempt.js';
import { MAX_COMPLETION_BATCH } from './completion-batcher.js';

/** A grant claimed ahead of a free slot waits about this long (ms) at most: see WorkerOptions.prefetch. */
const PREFETCH_WAIT_MS = 200;

/** How many of its last attempts' run times a worker sizes its prefetch by. */
const PREFETCH_SAMPLES = 32;

/** A grant claimed ahead of a free slot, with the time its claim was sent (monotonic ms). */
export interface PrefetchedGrant {
  readonly row: ClaimedStepRow;
  readonly sentAt: number;
}

/**
 * The accounting of a worker's `concurrency` activity slots: the attempts it holds and those whose code runs, the
 * slots set aside for turn commits (eager dispatch), and the grants claimed ahead of a free slot (prefetch) with
 * how many it may hold. Pure bookkeeping: the worker starts, releases and wakes.
 */
export class ActivitySlots {
  /** Attempts the worker holds, from their claim until their outcome is recorded (or cannot be). */
  readonly active = new Set<ActivityAttempt>();
  /** Attempts whose code runs: each holds one of the `concurrency` slots. */
  readonly busy = new Set<ActivityAttempt>();
  /** Grants claimed ahead of a free slot, oldest first (prefetch). */
  readonly prefetched: PrefetchedGrant[] = [];
  /** Slots set aside for turn commits that may grant this worker the steps they schedule (eager dispatch). */
  private reserved = 0;
  /** How long the code of each of the worker's last {@link PREFETCH_SAMPLES} attempts ran (ms), oldest first. */
  private readonly recentRuns: number[] = [];

  constructor(private readonly o: { readonly concurrency: number; readonly prefetch: number }) {}

  /**
   * Slots free for new attempts: a slot frees when an attempt's code ends; its outcome is then recorded while the
   * slot runs the next one, so claims and completions overlap instead of taking turns, and the outcomes that end
   * while one statement records others go together in the next (up to {@link MAX_COMPLETION_BATCH} a statement).
   * Outcomes being recorded are bounded too, by `max(concurrency, MAX_COMPLETION_BATCH)`, and slots set aside for
   * a turn's commit (eager dispatch) are not free.
   */
  open(): number {
    const { concurrency } = this.o;
    const recording = Math.max(concurrency, MAX_COMPLETION_BATCH);
    return Math.min(concurrency - this.busy.size, concurrency + recording - this.active.size) - this.reserved;
  }

  /** Slots free for new attempts and not promised to a grant waiting for one (prefetch): see {@link open}. */
  free(): number {
    return this.open() - this.prefetched.length;
  }

  /**
   * How many grants to hold ahead of free slots now: as many as the slots would start within
   * {@link PREFETCH_WAIT_MS} at the mean run time of the worker's last attempts (`concurrency` × 200 ms / mean),
   * at most `prefetch` — so that a grant claimed ahead waits about that long, and a worker whose activities run
   * short claims large batches (one claim statement for many attempts). None while that mean is 200 ms or more (a
   * worker whose activities run long claims only for its free slots), and none before an attempt has run.
   */
  prefetchLimit(): number {
    if (this.recentRuns.length === 0) return 0;
    const meanMs = this.recentRuns.reduce((sum, ms) => sum + ms, 0) / this.recentRuns.length;
    if (meanMs >= PREFETCH_WAIT_MS) return 0;
    const ahead = meanMs <= 0 ? Infinity : Math.floor((this.o.concurrency * PREFETCH_WAIT_MS) / meanMs);
    return Math.min(this.o.prefetch, ahead);
  }

  /** The code of an attempt ended after `ranMs`: remembered for {@link prefetchLimit}. */
  codeRan(ranMs: number): void {
    if (this.o.prefetch === 0) return;
    this.recentRuns.push(Math.max(0, ranMs));
    if (this.recentRuns.length > PREFETCH_SAMPLES) this.recentRuns.shift();
  }

  /** Set aside up to `most` of the slots free now (eager dispatch); returns how many (0: none free). */
  reserve(most: number): number {
    const limit = Math.min(most, this.free());
    if (limit <= 0) return 0;
    this.reserved += limit;
    return limit;
  }

  /** Give back `count` slots set aside by {@link reserve}. */
  unreserve(count: number): void {
    this.reserved -= count;
  }
}
