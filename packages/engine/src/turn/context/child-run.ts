/** `ctx.runChild(workflow, input, options)`: a child run, a durable step, and the schema of its options. */
import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  type RunChildOptions,
  type WorkflowDefinition,
} from '@palisade/sdk';
import { checkPayload, parseOptions, textProblem, validate } from '@palisade/sdk/internal';
import { z } from 'zod';
import type { ReplayState } from '../replay-state.js';

/** The options of `ctx.runChild`. */
const runChildOptionsSchema = z
  .object({
    key: z
      .string()
      .min(1)
      .max(512)
      .refine((k) => textProblem(k) === undefined, 'must be storable text (no NUL, no lone surrogate)')
      .optional(),
    queue: z
      .string()
      .regex(/^[A-Za-z0-9_.:-]{1,128}$/, 'must be 1–128 letters, digits, _ . : -')
      .optional(),
    cancellation: z.enum(['cascade', 'abandon']).optional(),
  })
  .strict();

/**
 * `ctx.runChild`: the child run's output once it ends (checked against the child's output schema as the parent
 * takes it), or a `ChildWorkflowFailure`. The child's id is chosen here (`TurnHost.uuid7`, time-ordered like every run id) so that the step
 * records it; the turn's commit creates the run. Something that is not a workflow, or bad options, throw
 * {@link InvalidOptionsError} at the call.
 */
export function runChild<O>(
  state: ReplayState,
  workflow: WorkflowDefinition,
  input: unknown,
  options: RunChildOptions = {},
): Promise<O> {
  const { workflowName, runId } = state;
  if (!workflow || (workflow as { kind?: unknown }).kind !== 'workflow') {
    throw new InvalidOptionsError(`ctx.runChild in workflow ${workflowName}`, [
      { path: 'workflow', message: 'must be a workflow from defineWorkflow()' },
    ]);
  }
  const where = `ctx.runChild(${workflow.name}) in workflow ${workflowName}`;
  const o = parseOptions(runChildOptionsSchema, options, where);
  const inputOf = (seq: number): unknown => {
    const what = `input of child workflow ${workflow.name} (step ${seq} of ${workflowName})`;
    const checked: unknown = validate(workflow.input, input, what);
    return JSON.parse(checkPayload(checked, what, PAYLOAD_LIMITS.inputBytes, { runId }));
  };
  // The child's output is checked against its schema as the parent takes it, as an activity's is.
  const map = (stored: unknown): unknown =>
    validate(workflow.output, stored, `output of child workflow ${workflow.name} in ${workflowName}`, {
      runId,
    });
  return state.durable<O>(
    'child',
    workflow.name,
    (seq) => ({
      seq,
      kind: 'child',
      name: workflow.name,
      childRunId: state.host.uuid7(),
      input: inputOf(seq),
      key: o.key ?? null,
      queue: o.queue ?? workflow.queue,
      priority: state.current.priority,
      cancellation: o.cancellation ?? 'cascade',
    }),
    map,
  );
}
