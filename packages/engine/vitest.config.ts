import { defaultServerConditions } from 'vite';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: { conditions: ['@palisade/source', ...defaultServerConditions] },
  ssr: { resolve: { conditions: ['@palisade/source', ...defaultServerConditions] } },
  test: { include: ['src/**/*.test.ts'] },
});
