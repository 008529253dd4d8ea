/**
 * One process per embedded data directory. PGlite keeps the whole database in the memory of the process that
 * opened it and writes its files back on its own schedule: a second process opening the same directory works on
 * its own copy and the two overwrite each other's files (runs enqueued by one were gone after the other closed).
 * A lock file beside the directory (`<dataDir>.lock`, holding the owner's pid and host name) refuses the second
 * process at once.
 * @module
 */
import { randomBytes } from 'node:crypto';
import { linkSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
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

/** What a lock file holds: its owner, nothing (gone), or something that is not a lock this code wrote whole. */
type LockContent =
  | { readonly state: 'owner'; readonly owner: LockOwner }
  | { readonly state: 'missing' }
  | { readonly state: 'unreadable' };

function readLock(path: string): LockContent {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'missing' };
    return { state: 'unreadable' };
  }
  try {
    const parsed = JSON.parse(text) as Partial<LockOwner>;
    if (typeof parsed.pid === 'number' && Number.isInteger(parsed.pid)) {
      return {
        state: 'owner',
        owner: {
          pid: parsed.pid,
          hostname: typeof parsed.hostname === 'string' ? parsed.hostname : '',
          startedAt: typeof parsed.startedAt === 'string' ? parsed.startedAt : '',
        },
      };
    }
  } catch {
    // not JSON: handled below
  }
  return { state: 'unreadable' };
}

/**
 * Whether a lock can be taken over: only a lock of this host whose process is gone. A lock of another host (the
 * directory on a shared disk) is never judged by its pid, which means nothing here. (A lock that cannot be read
 * is held, not stale: this code writes a lock whole, see `tryCreate`, so one it cannot read is not known to be.)
 */
function isStale(owner: LockOwner): boolean {
  if (owner.hostname !== '' && owner.hostname !== hostname()) return false;
  // Our own pid in a lock we do not hold: a previous process that had the same pid (a restarted container).
  return owner.pid === process.pid || !isAlive(owner.pid);
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

/**
 * Create the lock file whole, or return false when one exists. The content is written to a file of this process's
 * own first and then hard-linked to the lock's name (`link` fails with EEXIST when the name exists: exactly one
 * process creates it): a reader never sees the lock empty or half written. Creating it with O_EXCL and writing
 * after let a reader find it empty in between and take it over as stale while its creator went on.
 */
function tryCreate(path: string): boolean {
  const owner: LockOwner = { pid: process.pid, hostname: hostname(), startedAt: new Date().toISOString() };
  const draft = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(draft, JSON.stringify(owner), { mode: 0o644, flag: 'wx' });
  try {
    linkSync(draft, path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  } finally {
    rmSync(draft, { force: true });
  }
}

function lockedError(dataDir: string, path: string, content: LockContent | 'here'): PalisadeError {
  const owner = typeof content === 'object' && content.state === 'owner' ? content.owner : undefined;
  const otherHost = owner !== undefined && owner.hostname !== '' && owner.hostname !== hostname();
  const holder =
    content === 'here'
      ? `this process (pid ${process.pid}) already has it open`
      : owner === undefined
        ? `its lock file ${path} cannot be read (being written, or damaged); if no process uses the ` +
          'directory, remove the lock file'
        : `process ${owner.pid}${owner.hostname ? ` on ${owner.hostname}` : ''} holds it` +
          `${owner.startedAt ? ` since ${owner.startedAt}` : ''} (lock file ${path})` +
          (otherHost
            ? `; a process on another host is never taken for gone: if it is, remove the lock file`
            : '');
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
 * A lock left by a dead process of this host (its pid no longer runs) is taken over: the stale file is first
 * renamed to a name of this process's own (atomic), so of two processes taking over together only one wins; the
 * other finds the winner's live lock and is refused. A lock of another host, or one that cannot be read, is never
 * taken over. Released by `release()` and, as a last resort, when the process exits.
 * @throws PalisadeError `EMBEDDED_DATABASE_LOCKED` naming the holder's pid and host and the ways out.
 */
export function lockEmbeddedDirectory(dataDir: string): EmbeddedLock {
  const dir = resolve(dataDir);
  const path = `${dir}.lock`;
  if (heldHere.has(path)) throw lockedError(dir, path, 'here');
  for (let tries = 0; !tryCreate(path); tries++) {
    const content = readLock(path);
    if (content.state === 'missing') {
      if (tries >= 3) throw lockedError(dir, path, content);
      continue; // released (or moved aside) since our create: try again
    }
    if (content.state !== 'owner' || !isStale(content.owner) || tries >= 3)
      throw lockedError(dir, path, content);
    // Stale (a process of this host that is gone): move it aside under our own name, then try again.
    const aside = `${path}.stale-${process.pid}`;
    try {
      renameSync(path, aside);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      continue; // another process moved it first; try to create ours
    }
    const moved = readLock(aside);
    const same =
      moved.state === 'owner' &&
      moved.owner.pid === content.owner.pid &&
      moved.owner.hostname === content.owner.hostname &&
      moved.owner.startedAt === content.owner.startedAt;
    if (!same) {
      // We moved a fresh lock another process had just created after taking the stale one over: put it back.
      renameSync(aside, path);
      throw lockedError(dir, path, moved);
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
