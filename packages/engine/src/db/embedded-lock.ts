/**
 * One process per embedded data directory. PGlite keeps the whole database in the memory of the process that
 * opened it and writes its files back on its own schedule: a second process opening the same directory works on
 * its own copy and the two overwrite each other's files (runs enqueued by one were gone after the other closed).
 * A lock file beside the directory (`<dataDir>.lock`, holding the owner's pid) refuses the second process at once.
 * @module
 */
import { closeSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { resolve } from 'node:path';
import { PalisadeError } from '@palisade/sdk';

/** The holder recorded in a lock file. */
interface LockOwner {
  readonly pid: number;
  readonly hostname: string;
  readonly startedAt: string;
}

/** A held lock; `release()` removes the file (idempotent). */
export interface EmbeddedLock {
  readonly path: string;
  release(): void;
}

/** Locks held by this process, so opening a directory twice in one process is refused too. */
const heldHere = new Set<string>();

function readOwner(path: string): LockOwner | undefined {
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as Partial<LockOwner>;
    return typeof parsed.pid === 'number' ? (parsed as LockOwner) : undefined;
  } catch {
    return undefined; // missing, or half written by a process that died while writing it
  }
}

/** Whether `pid` is a live process on this machine (EPERM: alive, owned by another user). */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function tryCreate(path: string): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o644); // O_EXCL: exactly one process creates it
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  const owner: LockOwner = { pid: process.pid, hostname: hostname(), startedAt: new Date().toISOString() };
  writeSync(fd, JSON.stringify(owner));
  closeSync(fd);
  return true;
}

function lockedError(
  dataDir: string,
  path: string,
  owner: LockOwner | undefined,
  here: boolean,
): PalisadeError {
  const holder = here
    ? `this process (pid ${process.pid}) already has it open`
    : `process ${owner?.pid ?? '(unknown pid)'}${owner?.hostname ? ` on ${owner.hostname}` : ''} holds it` +
      `${owner?.startedAt ? ` since ${owner.startedAt}` : ''} (lock file ${path})`;
  return new PalisadeError(
    'EMBEDDED_DATABASE_LOCKED',
    `the embedded database ${dataDir} is in use: ${holder}. The embedded database serves one process. ` +
      'Use one process (stop the other, or run workers and the client in one engine); or run several ' +
      'processes on PostgreSQL: set DATABASE_URL, or start a local server with `palisade dev` and use the ' +
      'DATABASE_URL it prints.',
  );
}

/**
 * Take the lock of embedded data directory `dataDir`, or fail at once.
 *
 * A lock left by a dead process (its pid no longer runs) is taken over: the stale file is first renamed to a
 * name of this process's own (atomic), so of two processes taking over together only one wins; the other finds
 * the winner's live lock and is refused. Released by `release()` and, as a last resort, when the process exits.
 * @throws PalisadeError `EMBEDDED_DATABASE_LOCKED` naming the holder's pid and the ways out.
 */
export function lockEmbeddedDirectory(dataDir: string): EmbeddedLock {
  const dir = resolve(dataDir);
  const path = `${dir}.lock`;
  if (heldHere.has(path)) throw lockedError(dir, path, undefined, true);
  for (let tries = 0; !tryCreate(path); tries++) {
    const owner = readOwner(path);
    // Our own pid in a lock we do not hold: a previous process that had the same pid (a restarted container).
    if (owner !== undefined && owner.pid !== process.pid && isAlive(owner.pid)) {
      throw lockedError(dir, path, owner, false);
    }
    if (tries >= 3) throw lockedError(dir, path, owner, false);
    // Stale (its process is gone) or unreadable: move it aside under our own name, then try again.
    const aside = `${path}.stale-${process.pid}`;
    try {
      renameSync(path, aside);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      continue; // another process moved it first; try to create ours
    }
    const moved = readOwner(aside);
    if (moved !== undefined && moved.pid !== owner?.pid && isAlive(moved.pid)) {
      // We moved a fresh lock another process had just created after taking the stale one over: put it back.
      renameSync(aside, path);
      throw lockedError(dir, path, moved, false);
    }
    rmSync(aside, { force: true });
  }
  heldHere.add(path);
  const onExit = () => rmSync(path, { force: true });
  process.once('exit', onExit);
  let released = false;
  return {
    path,
    release() {
      if (released) return;
      released = true;
      heldHere.delete(path);
      process.removeListener('exit', onExit);
      rmSync(path, { force: true });
    },
  };
}
