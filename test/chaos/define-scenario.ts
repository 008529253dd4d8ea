/**
 * `defineScenario(name, definition)`: a chaos {@link Scenario} from its parts, so that a scenario file holds its
 * fault and its expectations and not the loop around them. The definition gives:
 *
 * - `iterations`: how many (the full run's, the CI subset's) and, as `variants`, what they cycle through:
 *   iteration `i` is about `variants[i % variants.length]`;
 * - `setup(ctx)`: once, before the first iteration (workers, proxies, a waiting run, …); its value is handed to
 *   every iteration and to `finish` as `state` (an object whose fields an iteration may replace: a killed
 *   worker's replacement, say);
 * - `iteration(ctx, { i, variant, iterations }, state)`: one iteration;
 * - `proceed(state)`: asked before each iteration; false ends the run early;
 * - `finish(ctx, state)`: once, after the last iteration (assertions on the whole scenario).
 *
 *   export const frozenZombie = defineScenario('T2 frozen zombie', {
 *     description: '…',
 *     iterations: { full: 15, ci: 3, variants: [1.2, 2, 5] },
 *     setup: (ctx) => Promise.all([ctx.spawnWorker(), ctx.spawnWorker()]),
 *     async iteration(ctx, { variant: factor }, workers) { … },
 *   });
 */
import type { ChaosTimings, Scenario, ScenarioContext } from './harness.js';

/** Which iteration of how many, and what it is about. */
export interface Iteration<V> {
  /** 0-based. */
  readonly i: number;
  /** `variants[i % variants.length]`; undefined for a scenario without variants. */
  readonly variant: V;
  /** The iterations of this run (the full or the CI count, or `CHAOS_ITERATIONS`). */
  readonly iterations: number;
}

export interface ScenarioDefinition<V, S> {
  /** One line: the fault and what must hold. */
  readonly description: string;
  /** How many iterations (`pnpm chaos`, the CI subset), and what they cycle through (not empty). */
  readonly iterations: Scenario['iterations'] & { readonly variants?: readonly V[] };
  /** Timings, if not the harness's defaults. */
  readonly timings?: Partial<ChaosTimings>;
  setup?(ctx: ScenarioContext): Promise<S> | S;
  proceed?(state: S): boolean;
  iteration(ctx: ScenarioContext, iteration: Iteration<V>, state: S): Promise<void>;
  finish?(ctx: ScenarioContext, state: S): Promise<void> | void;
}

export function defineScenario<V = undefined, S = undefined>(
  name: string,
  definition: ScenarioDefinition<V, S>,
): Scenario {
  const { description, timings } = definition;
  const { full, ci, variants } = definition.iterations;
  if (variants?.length === 0) throw new Error(`${name}: no variants`);
  return {
    name,
    description,
    iterations: { full, ci },
    ...(timings ? { timings } : {}),
    async run(ctx, iterations) {
      const state = (await definition.setup?.(ctx)) as S;
      for (let i = 0; i < iterations && (definition.proceed?.(state) ?? true); i++) {
        const variant = variants?.[i % variants.length] as V;
        await definition.iteration(ctx, { i, variant, iterations }, state);
      }
      await definition.finish?.(ctx, state);
    },
  };
}
