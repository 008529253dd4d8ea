import { fileURLToPath } from 'node:url';
import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

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
    testTimeout: 180_000,
    hookTimeout: 120_000,
  },
});
