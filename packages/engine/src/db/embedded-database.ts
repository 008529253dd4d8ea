import { mkdir } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
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
 */
export async function openEmbeddedDatabase(dataDir: string): Promise<EmbeddedDatabase> {
  await mkdir(dataDir, { recursive: true });
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
