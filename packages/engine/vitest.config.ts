import { defaultServerConditions, defineConfig } from 'vite';

export default defineConfig({
  resolve: { conditions: ['@palisade/source', ...defaultServerConditions] },
  ssr: { resolve: { conditions: ['@palisade/source', ...defaultServerConditions] } },
  test: { include: ['src/**/*.test.ts'] },
});
