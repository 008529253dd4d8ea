import { mkdir, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { InvalidOptionsError } from '@palisade/sdk';
import { lockEmbeddedDirectory } from './embedded-lock.js';

/** A file-backed PGlite that this process holds the embedded lock of. */
export interface EmbeddedDatabase {
  readonly pglite: PGlite;
  /** The absolute path of the lock file beside the data directory. */
  readonly lockPath: string;
  /** Close the PGlite instance, then release the lock (idempotent). */
  close(): Promise<void>;
}

/**
 * Open the embedded database in `dataDir` (created if missing) as `createEngine({ dataDir })` does, for a host
 * that wants its own tables in the same PGlite: pass `{ pglite: db.pglite }` to `createEngine`, and close it with
 * `db.close()` after the engine. A directory another live process holds is refused before PGlite reads it.
 * @throws PalisadeError `EMBEDDED_DATABASE_LOCKED` naming the pid of the process that holds `dataDir`.
 * @throws InvalidOptionsError naming `dataDir` when it cannot be a directory: it names a file, a path under a file,
 * or a place this process may not create it.
 */
export async function openEmbeddedDatabase(dataDir: string): Promise<EmbeddedDatabase> {
  await makeDataDirectory(dataDir);
  const lock = lockEmbeddedDirectory(dataDir);
  let pglite: PGlite;
  try {
    pglite = new PGlite(dataDir);
    await pglite.waitReady;
  } catch (error) {
    lock.release();
    throw error;
  }
  let closed: Promise<void> | undefined;
  return {
    pglite,
    lockPath: lock.path,
    close: () =>
      (closed ??= (async () => {
        try {
          if (!pglite.closed) await pglite.close();
        } finally {
          lock.release();
        }
      })()),
  };
}

/** Create `dataDir` (and its parents) if missing, or refuse it naming the option: never a raw `EEXIST`/`ENOTDIR`. */
async function makeDataDirectory(dataDir: string): Promise<void> {
  const refuse = (message: string) =>
    new InvalidOptionsError('engine options', [
      { path: 'dataDir', message: `${resolve(dataDir)} ${message}` },
    ]);
  try {
    await mkdir(dataDir, { recursive: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST')
      throw refuse('is a file, not a directory: name a directory for the embedded database');
    if (code === 'ENOTDIR')
      throw refuse('is under a file, not a directory: name a directory for the embedded database');
    if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') {
      throw refuse(`cannot be created (${code}): name a directory this process may write`);
    }
    throw error;
  }
  // mkdir with `recursive` succeeds on an existing path only when it is a directory; this is the belt to its braces
  // on platforms where it does not.
  if (!(await stat(dataDir)).isDirectory()) {
    throw refuse('is a file, not a directory: name a directory for the embedded database');
  }
}
