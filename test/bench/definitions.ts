/** The activities and workflows the benchmark runs: no-ops, so what is measured is the engine. */
import { z } from 'zod';
import {
  defineActivity,
  defineWorkflow,
  type ActivityDefinition,
  type WorkflowDefinition,
} from '@palisade/sdk';

const empty = z.object({});
type Empty = typeof empty;
const stepsOutput = z.object({ steps: z.number().int() });
type StepsOutput = typeof stepsOutput;

/** A no-op activity with the given lease (heartbeats default to a third of it). */
export function noopActivity(leaseMs: number): ActivityDefinition<Empty, Empty> {
  return defineActivity({
    name: 'bench.noop',
    input: empty,
    output: empty,
    leaseMs,
    run: () => Promise.resolve({}),
  });
}

/** A workflow that runs `activity` `steps` times, one after the other, and returns the count. */
export function sequentialWorkflow(
  steps: number,
  activity: ActivityDefinition<Empty, Empty>,
): WorkflowDefinition<Empty, StepsOutput> {
  return defineWorkflow({
    name: `bench.sequential-${steps}`,
    input: empty,
    output: stepsOutput,
    async run(_input, ctx) {
      for (let i = 0; i < steps; i++) await ctx.run(activity, {});
      return { steps };
    },
  });
}

const probeInput = z.object({ enqueuedAtMs: z.number() });

/**
 * An activity that reports how long after its enqueue call it started: `onStart(ms)` with
 * ms = (performance.timeOrigin + performance.now() at the start of `run`) − `enqueuedAtMs`.
 */
export function startProbeActivity(
  leaseMs: number,
  onStart: (latencyMs: number) => void,
): ActivityDefinition<typeof probeInput, Empty> {
  return defineActivity({
    name: 'bench.start-probe',
    input: probeInput,
    output: empty,
    leaseMs,
    run(input) {
      onStart(performance.timeOrigin + performance.now() - input.enqueuedAtMs);
      return Promise.resolve({});
    },
  });
}

/** Now, on the clock the probe compares with. */
export function probeNowMs(): number {
  return performance.timeOrigin + performance.now();
}
