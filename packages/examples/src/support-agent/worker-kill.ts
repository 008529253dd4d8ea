import type { AttemptStamp } from '../invoice-settlement/activities.js';
import type { NetworkLink } from '../shared/network-link.js';
import type { Timeline } from './timeline.js';

/** The killed worker and the step it was running when it died. */
export interface KillRecord {
  readonly emailId: string;
  readonly tool: string;
  readonly workerId: string;
  readonly runId: string;
  readonly stepId: string;
  readonly token: bigint;
  readonly epoch: number;
  readonly killedAtMs: number;
}

/** Options of {@link WorkerKill}. */
export interface WorkerKillOptions {
  /** The email whose loop the kill interrupts… */
  readonly emailId: string;
  /** …as this step of it starts (a tool name, or `model`). */
  readonly tool: string;
  /** Each agent worker's database link, by worker id. */
  readonly links: ReadonlyMap<string, NetworkLink>;
  readonly timeline: Timeline;
}

/**
 * The demo's first fault: a worker killed mid-loop. When the chosen step of the chosen email starts, the worker
 * running it dies: its database link is severed for good (nothing it sends arrives, now or later) and the step's code
 * runs no further. Its leases — this step's and those of everything else it had in flight — run out by the database
 * clock, other workers reclaim the steps, and the email's run goes on from its recorded history.
 */
export class WorkerKill {
  record: KillRecord | undefined;

  constructor(private readonly options: WorkerKillOptions) {}

  /** Give this to the activities as `beforeStep`. */
  readonly beforeStep = async (step: {
    readonly by: AttemptStamp;
    readonly emailId: string;
    readonly tool: string;
    readonly signal: AbortSignal;
  }): Promise<void> => {
    const { by } = step;
    const link = this.options.links.get(by.workerId);
    if (this.record || !link || step.emailId !== this.options.emailId || step.tool !== this.options.tool)
      return;
    this.record = {
      emailId: step.emailId,
      tool: step.tool,
      workerId: by.workerId,
      runId: by.runId,
      stepId: by.stepId,
      token: by.token,
      epoch: by.epoch,
      killedAtMs: this.options.timeline.elapsedMs(),
    };
    link.sever();
    this.options.timeline.line(
      'FAULT',
      `${by.workerId} is KILLED as it starts ${step.tool} for ${step.emailId} (token ${by.token}): its database link ` +
        'is severed for good, and whatever it had in flight is lost',
    );
    // A dead process runs nothing more: the step's code stops here (until the worker's own deadline aborts it).
    await new Promise<never>((_, reject) => {
      const abort = (): void => reject(step.signal.reason as Error);
      if (step.signal.aborted) abort();
      else step.signal.addEventListener('abort', abort, { once: true });
    });
  };
}
