/**
 * The replay of one run's workflow code as a {@link WorkflowInstance}: its first turn starts the code and hands it
 * the recorded outcomes in their recorded order, then what is new; a later turn continues the parked code with
 * what is new only. The state it works on is in `replay-state.ts`; delivery in `delivery/`; the result in
 * `turn-end.ts`.
 */
import { NonDeterminismError, type WorkflowDefinition } from '@palisade/sdk';
import { validate } from '@palisade/sdk/internal';
import type {
  ContinuedTurnInput,
  HistoryStepRow,
  TurnInput,
  TurnResult,
  WorkflowInstance,
} from './contract.js';
import { workflowContext } from './context/workflow-context.js';
import { deliverFresh } from './delivery/fresh.js';
import { deliver } from './delivery/outcomes.js';
import type { TurnHost } from './host.js';
import { ReplayState } from './replay-state.js';
import { finishTurn } from './turn-end.js';

/** One run's workflow code and its replay, kept across the turns of a {@link WorkflowInstance}. */
export class Replay implements WorkflowInstance {
  private readonly state: ReplayState;

  constructor(
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    private readonly workflow: WorkflowDefinition<any, any>,
    runId: string,
    history: readonly HistoryStepRow[],
    host: TurnHost,
  ) {
    this.state = new ReplayState(workflow, runId, history, host);
  }

  get expected(): WorkflowInstance['expected'] {
    return { liveSteps: this.state.known.size, maxDeliveredSeq: this.state.nextDeliveredSeq - 1 };
  }

  awaits(seq: number): boolean {
    return this.state.requested.get(seq)?.settled === false;
  }

  get continuable(): boolean {
    const s = this.state;
    return s.lastOutcome === 'blocked' && !s.tainted && !s.busy && !s.fatal && !s.nonDurable && !s.settled;
  }

  /** The first turn: start the code, hand it the recorded outcomes in their recorded order, then what is new. */
  async firstTurn(turn: TurnInput): Promise<TurnResult> {
    const state = this.state;
    state.open(turn);
    state.clockMs = Math.floor(turn.startedMs ?? turn.nowMs);
    const ctx = workflowContext(state);
    const name = this.workflow.name;
    // Start the workflow code; it runs until it blocks on durable calls.
    const tracking = state.host.track(state.sink, () => {
      Promise.resolve()
        .then(() =>
          this.workflow.run(validate(this.workflow.input, turn.input, `input of workflow ${name}`), ctx),
        )
        .then(
          (v: unknown) => state.settle({ ok: true, value: v }),
          (e: unknown) => state.settle({ ok: false, error: e }),
        );
    });
    try {
      await state.drain();
      await this.deliverRecorded(turn.history);
      await deliverFresh(state, turn.history);
    } finally {
      state.closed = true;
      tracking.end();
    }
    return finishTurn(state);
  }

  /**
   * Deliver the outcomes earlier turns delivered, in the order they did (`delivered_seq`), draining the code after
   * each. One the code does not await at its position fails the run with {@link NonDeterminismError}.
   */
  private async deliverRecorded(history: readonly HistoryStepRow[]): Promise<void> {
    const state = this.state;
    const delivered = history
      .filter((h) => h.delivered_seq !== null)
      .sort((a, b) => (a.delivered_seq as number) - (b.delivered_seq as number));
    state.nextDeliveredSeq = delivered.reduce((m, h) => Math.max(m, h.delivered_seq as number), 0) + 1;
    for (const h of delivered) {
      if (state.settled || state.fatal || state.nonDurable) break;
      if (!state.requested.has(h.seq)) {
        state.fatal ??= new NonDeterminismError(
          state.workflowName,
          h.seq,
          `${h.kind} ${h.name} (delivered in an earlier turn)`,
          state.position > h.seq ? 'a call that did not await it' : 'no call at that position yet',
          state.runId,
        );
        break;
      }
      state.seenDeliveredSeq = h.delivered_seq as number;
      deliver(state, h);
      await state.drain();
    }
  }

  async continueTurn(turn: ContinuedTurnInput): Promise<TurnResult | undefined> {
    if (!this.continuable) return undefined;
    const state = this.state;
    state.open(turn);
    // The tracking is on only while a turn runs (it slows every promise of the process); the code's
    // continuations report to this instance's sink, captured by the first turn.
    const tracking = state.host.track(state.sink, () => undefined);
    try {
      await deliverFresh(state, turn.fresh);
    } finally {
      state.closed = true;
      tracking.end();
    }
    return finishTurn(state);
  }
}
