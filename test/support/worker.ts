/**
 * Workers for tests, made from one list of the definitions they serve (workflows and activities, told apart by
 * their `kind`) and the other worker options as given:
 *
 *   const worker = await startWorker(engine, [flow, step], { pollIntervalMs: 50 });   // started
 *   const worker = workerFor(engine, [flow, step]);   // not started: listen to its events first
 *
 * Nothing else is defaulted. A test's engine (./engine.ts) stops its workers when it is closed after the test, so
 * a test stops one itself only where the stop is part of what it checks.
 */
import type { ActivityDefinition, WorkflowDefinition } from '@palisade/sdk';
import type { Engine, Worker, WorkerOptions } from '@palisade/engine';

/* eslint-disable @typescript-eslint/no-explicit-any -- a worker serves definitions of any input and output */
type AnyWorkflow = WorkflowDefinition<any, any>;
type AnyActivity = ActivityDefinition<any, any>;
/* eslint-enable @typescript-eslint/no-explicit-any */

/** A workflow or an activity a worker serves. */
export type Definition = AnyWorkflow | AnyActivity;

/** The options of `engine.worker(...)` other than what it serves. */
export type ServingOptions = Omit<WorkerOptions, 'workflows' | 'activities'>;

/**
 * A worker of `engine` serving `definitions` (in their order; a kind that none of them is stays out of the
 * options, as it does when a test names none), with `options`; not started.
 */
export function workerFor(
  engine: Engine,
  definitions: readonly Definition[],
  options: ServingOptions = {},
): Worker {
  const workflows = definitions.filter((d): d is AnyWorkflow => d.kind === 'workflow');
  const activities = definitions.filter((d): d is AnyActivity => d.kind === 'activity');
  return engine.worker({
    ...(workflows.length > 0 ? { workflows } : {}),
    ...(activities.length > 0 ? { activities } : {}),
    ...options,
  });
}

/** A worker as {@link workerFor} makes it, started. */
export async function startWorker(
  engine: Engine,
  definitions: readonly Definition[],
  options: ServingOptions = {},
): Promise<Worker> {
  const worker = workerFor(engine, definitions, options);
  await worker.start();
  return worker;
}
