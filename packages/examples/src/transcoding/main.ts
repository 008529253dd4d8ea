/**
 * Run the transcoding example on its own:
 *
 *   node --conditions=@palisade/source --import tsx packages/examples/src/transcoding/main.ts
 *
 * On the PostgreSQL server of DATABASE_URL if it is set, otherwise on the embedded database. Exits 1 if any
 * check fails.
 */
import { runTranscodingDemo } from './run-demo.js';

const result = await runTranscodingDemo({ databaseUrl: process.env.DATABASE_URL || undefined });
process.exitCode = result.ok ? 0 : 1;
