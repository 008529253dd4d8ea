/** A workflow of `steps` sequential activities, each adding one: the shape whose per-step cost the engine cuts. */
import { z } from 'zod';
import { defineActivity, defineWorkflow } from '@palisade/sdk';

export const add = defineActivity({
  name: 'add',
  input: z.object({ n: z.number() }),
  output: z.object({ n: z.number() }),
  run: ({ n }) => Promise.resolve({ n: n + 1 }),
});

export const counter = defineWorkflow({
  name: 'counter',
  input: z.object({ steps: z.number() }),
  output: z.object({ n: z.number() }),
  async run({ steps }, ctx) {
    let n = 0;
    for (let i = 0; i < steps; i++) n = (await ctx.run(add, { n })).n;
    return { n };
  },
});
