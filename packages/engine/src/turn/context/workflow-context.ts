/**
 * The `ctx` a workflow's code receives: one `WorkflowContext` per workflow instance, each method handed to its
 * own module in this folder. Recorded values (`now`, `random`, `uuid`) are here: each is one line.
 */
import type {
  ActivityDefinition,
  Duration,
  RunActivityOptions,
  RunChildOptions,
  SignalDefinition,
  WorkflowContext,
  WorkflowDefinition,
} from '@palisade/sdk';
import type { ReplayState } from '../replay-state.js';
import { runActivity } from './activity.js';
import { runChild } from './child-run.js';
import { patch } from './patches.js';
import { setProgress } from './progress.js';
import { waitForSignal } from './signal-wait.js';
import { sleep, sleepUntil } from './timers.js';

/** The workflow context over `state`: what the code calls, in every turn of the instance. */
export function workflowContext(state: ReplayState): WorkflowContext {
  return {
    // The turn in progress's info (a kept instance's code sees each turn's own turnAttempt, as on replay).
    get info() {
      return state.current.info;
    },
    run: <O>(activity: ActivityDefinition, input: unknown, options?: RunActivityOptions) =>
      runActivity<O>(state, activity, input, options),
    runChild: <O>(workflow: WorkflowDefinition, input: unknown, options?: RunChildOptions) =>
      runChild<O>(state, workflow, input, options),
    sleep: (duration: Duration) => sleep(state, duration),
    sleepUntil: (date: Date) => sleepUntil(state, date),
    waitForSignal: (signal: SignalDefinition, options?: { timeoutMs?: Duration }) =>
      waitForSignal(state, signal, options),
    setProgress: (value: unknown) => setProgress(state, value),
    patched: (changeId: string) => patch(state, changeId, 'patched'),
    deprecatePatch: (changeId: string) => void patch(state, changeId, 'deprecatePatch'),
    // Whole ms, as a Date holds them: the recorded value is exactly what the code saw (the DB clock has µs).
    now: () => new Date(state.value('now', () => Math.floor(state.current.nowMs))),
    random: () => state.value('random', () => state.host.random()),
    uuid: () => state.value('uuid', () => state.host.randomUUID()),
  };
}
