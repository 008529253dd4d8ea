/**
 * The layer map is enforced: ESLint, with the boundary rules of `eslint.layers.js` only (no type information, so
 * this stays fast), refuses a back-up import and lets an allowed one through. Each source is made up here and
 * linted as if it were a file at the given path; the imports it names are real files, so the resolver finds them.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint, type Linter } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const eslint = new ESLint({ cwd: ROOT, overrideConfigFile: join(ROOT, 'eslint.layers.js') });

/** The problems ESLint reports for `code` placed at `path` (relative to the repository root). */
async function lint(path: string, code: string): Promise<Pick<Linter.LintMessage, 'ruleId' | 'message'>[]> {
  const [result] = await eslint.lintText(code, { filePath: join(ROOT, path) });
  return (result?.messages ?? []).map(({ ruleId, message }) => ({ ruleId, message }));
}

const engine = (path: string) => `packages/engine/src/${path}`;

// Linting follows imports through the engine's graph (for no-cycle): allow for a busy machine.
describe('the layer map in lint', { timeout: 30_000 }, () => {
  it('refuses a statement in queries/ that imports the worker above it', async () => {
    const problems = await lint(
      engine('queries/back-up.ts'),
      "import { monotonicNow } from '../worker/lease-clock.js';\nexport const now = monotonicNow;\n",
    );
    expect(problems).toEqual([
      {
        ruleId: 'import-x/no-restricted-paths',
        message: expect.stringContaining('"../worker/lease-clock.js" imported in restricted zone') as string,
      },
    ]);
  });

  it('refuses a turn/ module that imports the database beside it', async () => {
    const problems = await lint(
      engine('turn/back-up.ts'),
      "import type { Database } from '../db/database.js';\nexport type TurnDatabase = Database;\n",
    );
    expect(problems).toEqual([
      {
        ruleId: 'import-x/no-restricted-paths',
        message: expect.stringContaining('"../db/database.js" imported in restricted zone') as string,
      },
    ]);
  });

  it('refuses db/ importing the statements above it (the cycle it once had)', async () => {
    const problems = await lint(
      engine('db/back-up.ts'),
      "import { notifyOnce } from '../queries/notify.js';\nexport const notify = notifyOnce;\n",
    );
    expect(problems.map((p) => p.ruleId)).toEqual(['import-x/no-restricted-paths']);
  });

  it('lets a statement in queries/ import the database below it', async () => {
    const problems = await lint(
      engine('queries/allowed.ts'),
      "import type { Database } from '../db/database.js';\nexport type QueryDatabase = Database;\n",
    );
    expect(problems).toEqual([]);
  });

  it('refuses an import cycle inside a layer', async () => {
    // complete-step.ts imports notify.ts: notify.ts importing complete-step.ts back closes a cycle.
    const problems = await lint(
      engine('queries/notify.ts'),
      "import { completeStep } from './complete-step.js';\nexport const complete = completeStep;\n",
    );
    expect(problems.map((p) => p.ruleId)).toEqual(['import-x/no-cycle']);
  });

  it('refuses node:* and drivers in the SDK', async () => {
    const problems = await lint(
      'packages/sdk/src/back-up.ts',
      "import { readFile } from 'node:fs/promises';\nimport postgres from 'postgres';\nexport { readFile, postgres };\n",
    );
    expect(problems.map((p) => p.ruleId)).toEqual(['import-x/no-nodejs-modules', 'no-restricted-imports']);
  });

  it('refuses a test that imports engine source by path', async () => {
    const problems = await lint(
      'test/core/back-up.test.ts',
      "import { claimSteps } from '../../packages/engine/src/queries/claim-steps.js';\nexport { claimSteps };\n",
    );
    expect(problems.map((p) => p.ruleId)).toEqual(['no-restricted-imports']);
  });
});
