/**
 * Run the support-agent demo from the command line:
 *
 *   pnpm --filter @palisade/examples demo:support-agent                       # embedded database (PGlite, in memory)
 *   DATABASE_URL=postgres://… pnpm --filter @palisade/examples demo:support-agent   # a PostgreSQL server
 *   PALISADE_LLM_BASE_URL=https://api.openai.com/v1 PALISADE_LLM_API_KEY=… …       # with a real model
 *
 * Exits 0 when every check passed, 1 otherwise.
 */
import { runSupportAgentDemo } from './run-demo.js';

const databaseUrl = process.env.DATABASE_URL || undefined;
const result = await runSupportAgentDemo(databaseUrl ? { databaseUrl } : {});
process.exitCode = result.ok ? 0 : 1;
