import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createReadStream } from 'node:fs';
import { copyFile, mkdir, rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { LeaseLostError } from '@palisade/sdk';
import { quoteIdent, type StoreDatabase } from './store-database.js';

/** An object as the manifest lists it. */
export interface StoredObject {
  readonly key: string;
  /** The fencing token of the write that put this version. */
  readonly token: bigint;
  /** Absolute path of the blob holding this version's bytes. */
  readonly path: string;
  readonly bytes: number;
  readonly sha256: string;
  /** Who sent the write (a worker id). */
  readonly writer: string;
}

/** A write the store refused because a higher token had been accepted for the object. */
export interface Refusal {
  readonly key: string;
  readonly token: bigint;
  readonly currentToken: bigint | null;
  readonly writer: string;
  readonly error: LeaseLostError;
}

/** Events of an {@link ObjectStore}. */
export interface ObjectStoreEventMap {
  'object:accepted': [StoredObject];
  'object:refused': [Refusal];
}

/** The object store as one worker reaches it (through its own network). */
export interface StoreClient {
  /** The current version of `key`, or undefined. */
  get(key: string): Promise<StoredObject | undefined>;
  /**
   * Upload `file` as `key`, fenced by `token` (the attempt's `ctx.info.fencing.token`).
   * @throws LeaseLostError when the store already accepted a higher token for `key`; nothing is written.
   */
  put(key: string, file: string, token: bigint): Promise<StoredObject>;
}

const KEY = /^[a-z0-9][a-z0-9._-]*(\/[a-z0-9][a-z0-9._-]*)*$/;

interface ObjectRow {
  key: string;
  token: string;
  blob: string;
  bytes: string | number;
  sha256: string;
  writer: string;
}

/**
 * A small object store: blobs in a local directory, and a manifest table that says which blob is the current
 * version of each key. Every write is fenced per object: the manifest accepts it only with a fencing token at
 * least as high as the highest it has accepted for that key (a fence row per key, raised in the same transaction
 * as the manifest row), so a worker whose attempt was superseded can never replace a newer attempt's output,
 * however late its upload arrives.
 */
export class ObjectStore implements StoreClient {
  readonly events = new EventEmitter<ObjectStoreEventMap>();
  private readonly objects: string;
  private readonly refusalsTable: string;

  private constructor(
    /** Directory holding the blobs. */
    readonly dir: string,
    private readonly db: StoreDatabase,
  ) {
    this.objects = `${quoteIdent(db.schema)}.objects`;
    this.refusalsTable = `${quoteIdent(db.schema)}.refusals`;
  }

  /** Open (and create if needed) a store whose blobs live under `dir` and whose manifest is in `database`. */
  static async open(options: { dir: string; database: StoreDatabase }): Promise<ObjectStore> {
    const store = new ObjectStore(options.dir, options.database);
    await mkdir(join(options.dir, 'blobs'), { recursive: true });
    await options.database.install();
    await options.database.query(`CREATE TABLE IF NOT EXISTS ${store.objects} (
      key text PRIMARY KEY, token bigint NOT NULL, blob text NOT NULL, bytes bigint NOT NULL, sha256 text NOT NULL,
      writer text NOT NULL, accepted_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    await options.database.query(`CREATE TABLE IF NOT EXISTS ${store.refusalsTable} (
      id bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL, current_token bigint, writer text NOT NULL,
      refused_at timestamptz NOT NULL DEFAULT clock_timestamp())`);
    return store;
  }

  get(key: string): Promise<StoredObject | undefined> {
    return this.read(key);
  }

  /** Like {@link StoreClient.put}, naming the writer (recorded in the manifest and in refusals). */
  async put(key: string, file: string, token: bigint, writer = 'unknown'): Promise<StoredObject> {
    if (!KEY.test(key)) throw new Error(`object key ${JSON.stringify(key)} must be lowercase path segments`);
    // Stage the bytes under a name of their own (key@token) first, then let the fenced manifest row point at
    // them: a refused or crashed upload leaves at most an unreferenced blob, never a replaced one.
    const blob = `blobs/${key}@${token}`;
    const path = join(this.dir, blob);
    await mkdir(dirname(path), { recursive: true });
    await copyFile(file, `${path}.partial`);
    await rename(`${path}.partial`, path);
    const { bytes, sha256 } = await digest(path);
    try {
      await this.db.fencedWrite({ scope: key, token }, (tx) =>
        tx.query(
          `INSERT INTO ${this.objects} (key, token, blob, bytes, sha256, writer) VALUES ($1, $2::bigint, $3, $4, $5, $6)
           ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token, blob = EXCLUDED.blob, bytes = EXCLUDED.bytes,
             sha256 = EXCLUDED.sha256, writer = EXCLUDED.writer, accepted_at = clock_timestamp()`,
          [key, token.toString(), blob, bytes, sha256, writer],
        ),
      );
    } catch (error) {
      if (!(error instanceof LeaseLostError)) throw error;
      await rm(path, { force: true });
      await this.db.query(
        `INSERT INTO ${this.refusalsTable} (key, token, current_token, writer) VALUES ($1, $2::bigint, $3::bigint, $4)`,
        [key, token.toString(), error.currentToken?.toString() ?? null, writer],
      );
      this.events.emit('object:refused', { key, token, currentToken: error.currentToken, writer, error });
      throw error;
    }
    const stored: StoredObject = { key, token, path, bytes, sha256, writer };
    this.events.emit('object:accepted', stored);
    return stored;
  }

  /** Every object whose key starts with `prefix`, by key. */
  async list(prefix = ''): Promise<StoredObject[]> {
    const rows = await this.db.query<ObjectRow>(
      `SELECT key, token::text AS token, blob, bytes, sha256, writer FROM ${this.objects}
        WHERE starts_with(key, $1) ORDER BY key`,
      [prefix],
    );
    return rows.map((r) => this.toObject(r));
  }

  /** Every refused write, oldest first (the store's own record, not an in-memory event). */
  async refusals(): Promise<Omit<Refusal, 'error'>[]> {
    const rows = await this.db.query<{
      key: string;
      token: string;
      current_token: string | null;
      writer: string;
    }>(
      `SELECT key, token::text AS token, current_token::text AS current_token, writer FROM ${this.refusalsTable} ORDER BY id`,
    );
    return rows.map((r) => ({
      key: r.key,
      token: BigInt(r.token),
      currentToken: r.current_token === null ? null : BigInt(r.current_token),
      writer: r.writer,
    }));
  }

  private async read(key: string): Promise<StoredObject | undefined> {
    const rows = await this.db.query<ObjectRow>(
      `SELECT key, token::text AS token, blob, bytes, sha256, writer FROM ${this.objects} WHERE key = $1`,
      [key],
    );
    return rows[0] ? this.toObject(rows[0]) : undefined;
  }

  private toObject(row: ObjectRow): StoredObject {
    return {
      key: row.key,
      token: BigInt(row.token),
      path: join(this.dir, row.blob),
      bytes: Number(row.bytes),
      sha256: row.sha256,
      writer: row.writer,
    };
  }
}

async function digest(path: string): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(path)) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { bytes, sha256: hash.digest('hex') };
}
