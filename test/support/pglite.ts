/**
 * PGlite instances for tests, started from a data directory initialised once per test run.
 *
 * A new in-memory PGlite runs initdb before its first query: seconds of CPU (6–13 s seen on a loaded 2-core
 * machine), paid by every test file that opens one. The global setup (./global-setup.ts) runs it once and saves
 * the fresh data directory as a tarball; each `testPglite()` loads that copy instead (~1.4 s on the same machine).
 * The copy is the same initdb output, holding no schema of ours: each engine still migrates its own.
 */
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite, type PGliteOptions } from '@electric-sql/pglite';
import { inject } from 'vitest';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A tarball of a freshly initialised PGlite data directory (`dumpDataDir('none')`); '' when not made. */
    pgliteTemplatePath: string;
  }
}

let template: Blob | undefined;

/** A new in-memory PGlite, from the run's initialised data directory when the global setup made one. */
export function testPglite(options: Omit<PGliteOptions, 'loadDataDir' | 'dataDir'> = {}): PGlite {
  const path = inject('pgliteTemplatePath');
  if (!path) return new PGlite(options);
  template ??= new Blob([readFileSync(path)]);
  return new PGlite({ ...options, loadDataDir: template });
}

/**
 * Initialise a PGlite data directory and write it as a tarball at `path` (for the global setup), in a child process
 * (./pglite-template.ts, run by tsx).
 * @throws when the child fails, with its stderr.
 */
export async function writePgliteTemplate(path: string): Promise<void> {
  const { execFile } = await import('node:child_process');
  const script = fileURLToPath(new URL('./pglite-template.ts', import.meta.url));
  await new Promise<void>((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', script, path],
      { cwd: dirname(script) },
      (error, _stdout, stderr) =>
        error ? reject(new Error(`PGlite template: ${error.message}\n${stderr}`)) : resolve(),
    );
  });
}
