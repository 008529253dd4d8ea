import { fileURLToPath } from 'node:url';
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The longest files of the suite (a clean-clone CI run on 2026-12-07: chaos 466 s, the support-agent example
 * 130 s, `palisade runs` 112 s, the packed install 89 s), started first. Left to the default order (file size,
 * with no timings cached in a clean clone) the chaos file started about ten minutes in and ran alone at the end.
 */
const LONGEST_FIRST = [
  'chaos/chaos.test.ts',
  'examples/support-agent.test.ts',
  'cli/runs.test.ts',
  'install/packed-install.test.ts',
];

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (file: TestSpecification): number => {
      const at = LONGEST_FIRST.findIndex((name) => file.moduleId.endsWith(`/${name}`));
      return at === -1 ? LONGEST_FIRST.length : at;
    };
    return sorted
      .map((file, index) => ({ file, index }))
      .sort((a, b) => rank(a.file) - rank(b.file) || a.index - b.index)
      .map(({ file }) => file);
  }
}

export default defineConfig({
  // Workspace packages are consumed from source (their exports' '@palisade/source' condition).
  resolve: { conditions: ['@palisade/source', ...defaultServerConditions] },
  ssr: { resolve: { conditions: ['@palisade/source', ...defaultServerConditions] } },
  test: {
    root: fileURLToPath(new URL('.', import.meta.url)),
    include: ['**/*.test.ts'],
    globalSetup: ['./support/global-setup.ts'],
    // A passing run prints no engine log lines (JSON on stderr); PALISADE_LOG_LEVEL=warn shows them again.
    env: { PALISADE_LOG_LEVEL: process.env.PALISADE_LOG_LEVEL ?? 'silent' },
    // Most files wait on the database, worker processes or real leases rather than on the CPU: three files at
    // a time on two cores keeps CI well inside its budget.
    maxWorkers: 3,
    sequence: { sequencer: LongestFirst },
    testTimeout: 180_000,
    hookTimeout: 120_000,
  },
});
