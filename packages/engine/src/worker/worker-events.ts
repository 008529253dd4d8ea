import { EventEmitter } from 'node:events';
import type { AbortReason, AttemptAbortedError, LeaseLostError, SerializedFailure } from '@palisade/sdk';
import type { AttemptRef } from '../queries/fenced-outcome.js';

/** Events a worker emits (colon-namespaced, STYLE.md); tests and the demo wait on these instead of sleeping. */
export interface WorkerEventMap {
  /**
   * `grant`: `'claimed'` by the worker's claim, `'prefetched'` by a claim ahead of a free slot, started once one
   * freed (see `prefetch`), `'eager'` by the commit of the turn that scheduled the step.
   */
  'attempt:claimed': [
    { attempt: AttemptRef; epoch: number; activity: string; grant: 'claimed' | 'prefetched' | 'eager' },
  ];
  'attempt:started': [{ attempt: AttemptRef }];
  'attempt:completed': [{ attempt: AttemptRef; output: unknown }];
  'attempt:failed': [{ attempt: AttemptRef; failure: SerializedFailure; retry: boolean }];
  'attempt:aborted': [{ attempt: AttemptRef; reason: AbortReason; error: AttemptAbortedError }];
  'attempt:released': [{ attempt: AttemptRef; why: string }];
  'attempt:stale-rejected': [{ attempt: AttemptRef; error: LeaseLostError }];
  /**
   * A workflow turn committed. `replay`: `'full'` when the turn replayed the code from the top over the run's
   * whole history, `'continued'` when it continued the workflow instance this worker kept from the run's previous
   * turn and handed it only the new outcomes (see `workflowCacheSize`). `grant`: `'claimed'` when the worker's
   * turn claim granted the turn, `'eager'` when the completion of one of the run's activities on this worker did,
   * in the same statement (an eager turn), `'fused'` when the worker ran it on its kept instance right after one of
   * the run's activities completed here and recorded both in one statement (a fused step).
   */
  'turn:committed': [
    {
      runId: string;
      workflow: string;
      outcome: 'blocked' | 'completed' | 'failed' | 'cancelled';
      replay: 'full' | 'continued';
      grant: 'claimed' | 'eager' | 'fused';
      /** Why the run ended, when this turn ended it failed or cancelled. */
      error?: SerializedFailure;
    },
  ];
  'heartbeat:sent': [{ attempts: number; renewed: number; lost: number }];
  'heartbeat:failed': [{ error: unknown }];
  /** A retention sweep ended (`createEngine({ retentionMs })`): what it deleted, zero counts included. */
  'retention:pruned': [
    { runs: number; steps: number; attempts: number; events: number; olderThanMs: number },
  ];
  /**
   * The worker's schedule evaluation read due schedules (`WorkerOptions.schedules`): how many, how many it moved
   * forward (the rest another evaluator got first), how many runs it created, and how long until the next tick.
   */
  'schedules:evaluated': [
    { evaluated: number; applied: number; runsCreated: number; nextDueInMs: number | null },
  ];
  /**
   * The worker asked for a turn of the ring of `ready` (STORAGE.md §3.6), as it does once a second after it claimed,
   * was granted or committed anything: `rotated`, or why not — `early` (the current slot is younger than a second or
   * holds under 256 kB), `busy` (another worker is rotating) or `locked` (a transaction held the oldest slot past the
   * rotation's 50 ms wait; nothing changed).
   */
  'ready:rotation': [{ outcome: 'rotated' | 'early' | 'busy' | 'locked' }];
  /**
   * The worker checked the planner statistics of the engine's tables (PostgreSQL: at start, then every 30 s while
   * it works): the tables it analyzed because autovacuum is off for them and they changed by more than 50 rows
   * plus their row estimate (often none).
   */
  'tables:analyzed': [{ tables: string[] }];
  'worker:started': [{ workerId: string }];
  'worker:stopping': [{ workerId: string }];
  'worker:stopped': [{ workerId: string }];
  'worker:error': [{ error: unknown }];
  /**
   * Work is due on one of the worker's queues for an activity or workflow it does not register (logged as a
   * `worker:unserved-work` warning too; once per kind, name and queue, repeated every 10 minutes while due).
   */
  'worker:unserved-work': [{ workerId: string; kind: 'activity' | 'workflow'; name: string; queue: string }];
}

/**
 * A typed event emitter for {@link WorkerEventMap}. Unlike a plain EventEmitter, a listener that throws does not
 * throw out of `emit()`: the engine emits in the middle of its own work (an attempt's abort emits
 * `attempt:aborted` just before it fires the activity's AbortSignal), and a listener's bug must not stop that
 * work. The error goes to {@link WorkerEvents.listenerFailed} (the worker logs it as `worker:listener-failed`)
 * and the remaining listeners still run.
 */
export class WorkerEvents extends EventEmitter<WorkerEventMap> {
  /** Called with the event's name and what a listener threw; set by the worker. Default: ignore. */
  listenerFailed: (event: string, error: unknown) => void = () => undefined;

  override emit<K extends keyof WorkerEventMap>(event: K, ...args: WorkerEventMap[K]): boolean {
    // rawListeners: a `once` listener's wrapper, which removes it before calling it.
    const listeners = this.rawListeners(event) as ((...a: unknown[]) => unknown)[];
    for (const listener of listeners) {
      try {
        listener.apply(this, args);
      } catch (error) {
        try {
          this.listenerFailed(event, error);
        } catch {
          // the reporter failed too: nothing left to tell
        }
      }
    }
    return listeners.length > 0;
  }
}
