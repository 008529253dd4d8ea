import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './src/schema/drizzle-kit-entry.ts',
  out: './src/migrations',
});
