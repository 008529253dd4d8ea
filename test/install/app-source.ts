/**
 * The files of the temporary application the packed-install test builds: what the README's Install section and
 * API show, as a user would write them.
 */

/** package.json of the application. */
export const APP_PACKAGE_JSON = JSON.stringify(
  { name: 'palisade-install-check', private: true, type: 'module', version: '0.0.0' },
  null,
  2,
);

/**
 * A plain tsconfig a Node 20 ESM application would have. skipLibCheck as drizzle-orm's own docs ask (its
 * declarations for drivers not installed, gel and mysql2, do not resolve); the application's use of our types is
 * checked either way.
 */
export const APP_TSCONFIG = JSON.stringify(
  {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: ['node'],
    },
    include: ['*.ts'],
  },
  null,
  2,
);

/** The workflow and activity definitions (also served by `palisade worker defs.ts`). */
export const APP_DEFS = `import { z } from 'zod';
import { defineActivity, defineWorkflow } from '@palisade/sdk';

export const charge = defineActivity({
  name: 'charge',
  input: z.object({ invoiceId: z.string(), amountMinor: z.number().int().positive() }),
  output: z.object({ chargeId: z.string(), token: z.string() }),
  retry: { maximumAttempts: 5, initialIntervalMs: '1s', backoffCoefficient: 2, maximumIntervalMs: '1m' },
  startToCloseTimeoutMs: '5m',
  leaseMs: '30s',
  async run(input, ctx) {
    await ctx.heartbeat({ step: 'charging' });
    JSON.stringify(ctx.info); // loggable as JSON
    return { chargeId: 'ch_' + input.invoiceId, token: ctx.info.fencing.tokenString };
  },
});

export const settle = defineWorkflow({
  name: 'settle',
  input: z.object({ invoices: z.array(z.object({ id: z.string(), amountMinor: z.number().int().positive() })) }),
  output: z.object({ charged: z.number() }),
  async run(input, ctx) {
    const charges = await Promise.all(
      input.invoices.map((i) => ctx.run(charge, { invoiceId: i.id, amountMinor: i.amountMinor })),
    );
    return { charged: charges.length };
  },
});
`;

/** The application: README API on createEngine() with no options (DATABASE_URL, else the embedded database). */
export const APP_MAIN = `import { createEngine, isPalisadeError, type RunHandle } from '@palisade/engine';
import { charge, settle } from './defs.js';

const engine = await createEngine();
const worker = engine.worker({ workflows: [settle], activities: [charge], concurrency: 10 });
await worker.start();
const handle: RunHandle<{ charged: number }> = await engine.client.start(
  settle,
  { invoices: [{ id: 'INV-1', amountMinor: 1200 }, { id: 'INV-2', amountMinor: 300 }] },
  { key: 'batch-42' },
);
const output = await handle.result({ timeoutMs: 60_000 });
const description = await handle.describe();
const retryUnknown = await engine.client.retry('00000000-0000-4000-8000-000000000000').then(
  () => 'retried',
  (error: unknown) => (isPalisadeError(error, 'RUN_NOT_FOUND') ? 'RUN_NOT_FOUND' : String(error)),
);
console.log(
  JSON.stringify({
    driver: engine.database.driver,
    output,
    handle,
    steps: description.steps.map((s) => s.status),
    retryUnknown,
  }),
);
await worker.stop({ graceMs: 10_000 });
await engine.close();
`;
