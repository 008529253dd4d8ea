/**
 * Fault injection for the demo: each worker reaches the database and the object store through a network link
 * the demo can cut (a partition) and restore. While a link is down, nothing sent over it arrives and nothing
 * comes back; what was sent is held and delivered, in order, when the link heals — like packets stuck in a
 * congested or partitioned network. The worker itself keeps running: its timers fire, its ffmpeg keeps encoding.
 *
 * On real PostgreSQL the link is a TCP proxy in front of the server. On the embedded PGlite (one in-process
 * instance) it wraps the instance so that a call and its reply each wait while the link is down.
 */
import { createServer, connect, type Socket } from 'node:net';
import type { PGlite } from '@electric-sql/pglite';
import type { ObjectStore, StoreClient, StoredObject } from './object-store.js';

/** A worker's network: up or partitioned. */
export class NetworkLink {
  private down = false;
  private held: (() => void)[] = [];
  private waiting: (() => void)[] = [];

  constructor(readonly name: string) {}

  get partitioned(): boolean {
    return this.down;
  }

  /** Cut the link: from now on everything sent either way is held. */
  partition(): void {
    this.down = true;
  }

  /** Restore the link and deliver everything held, in the order it was sent. */
  heal(): void {
    if (!this.down) return;
    this.down = false;
    for (const deliver of this.held.splice(0)) deliver();
    for (const resolve of this.waiting.splice(0)) resolve();
  }

  /** Deliver now if the link is up, otherwise when it heals. */
  carry(deliver: () => void): void {
    if (this.down) this.held.push(deliver);
    else deliver();
  }

  /** Resolves at once while the link is up, otherwise when it heals. */
  passage(): Promise<void> {
    return this.down ? new Promise<void>((resolve) => this.waiting.push(resolve)) : Promise.resolve();
  }
}

/** A TCP proxy from a local port to the server of `databaseUrl`, carried over `link`. */
export interface LinkedDatabaseUrl {
  /** `databaseUrl` with host and port replaced by the proxy's. */
  readonly url: string;
  close(): Promise<void>;
}

/** Put `link` between a worker and the PostgreSQL server of `databaseUrl` (TCP only). */
export async function linkPostgres(link: NetworkLink, databaseUrl: string): Promise<LinkedDatabaseUrl> {
  const target = new URL(databaseUrl);
  const upstreamHost = target.hostname === '' ? '127.0.0.1' : target.hostname.replace(/^\[|\]$/g, '');
  const upstreamPort = Number(target.port === '' ? 5432 : target.port);
  const sockets = new Set<Socket>();
  const forward = (from: Socket, to: Socket): void => {
    from.on('data', (chunk: Buffer) =>
      link.carry(() => {
        if (!to.destroyed) to.write(chunk);
      }),
    );
  };
  const server = createServer((client) => {
    const upstream = connect(upstreamPort, upstreamHost);
    sockets.add(client);
    sockets.add(upstream);
    forward(client, upstream);
    forward(upstream, client);
    const close = (): void => {
      // A close travels like data: a partitioned peer does not learn of it until the link heals.
      link.carry(() => {
        client.destroy();
        upstream.destroy();
      });
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy has no TCP address');
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(address.port);
  return {
    url: url.toString(),
    async close() {
      link.heal();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** PGlite methods that talk to the database; each call and each reply crosses the link. */
const PGLITE_CALLS = new Set<PropertyKey>([
  'query',
  'exec',
  'sql',
  'transaction',
  'execProtocol',
  'execProtocolRaw',
  'describeQuery',
]);

/** Put `link` between a worker and the embedded PGlite: the same instance, reached over the link. */
export function linkPglite(link: NetworkLink, pglite: PGlite): PGlite {
  return new Proxy(pglite, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      const method = value as (...args: unknown[]) => unknown;
      if (!PGLITE_CALLS.has(property)) return method.bind(target);
      return async (...args: unknown[]) => {
        await link.passage();
        const reply = await method.apply(target, args);
        await link.passage();
        return reply;
      };
    },
  });
}

/** Options of {@link linkStore}. */
export interface LinkStoreOptions {
  /** Recorded as the writer of every upload. */
  readonly writer: string;
  /** Called as an upload leaves the worker, before it crosses the link (fault injection may cut it here). */
  readonly onUpload?: (upload: { key: string; token: bigint; writer: string }) => void;
}

/** The object store as a worker behind `link` reaches it. */
export function linkStore(store: ObjectStore, link: NetworkLink, options: LinkStoreOptions): StoreClient {
  const across = async <T>(request: () => Promise<T>): Promise<T> => {
    await link.passage();
    try {
      return await request();
    } finally {
      await link.passage();
    }
  };
  return {
    get: (key: string): Promise<StoredObject | undefined> => across(() => store.get(key)),
    put(key: string, file: string, token: bigint): Promise<StoredObject> {
      options.onUpload?.({ key, token, writer: options.writer });
      return across(() => store.put(key, file, token, options.writer));
    },
  };
}
