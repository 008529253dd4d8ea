/**
 * Fault injection for the demos: each worker reaches the database (and, in the transcoding demo, the object
 * store) over its own link, which the demo can cut (a partition) and restore. While a link is cut nothing sent
 * over it arrives and nothing comes back; what was sent is held and delivered, in order, when the link heals —
 * a partitioned network, as seen by the worker. The worker itself keeps running: its timers fire, its local
 * lease deadline passes, its activity code keeps waiting on whatever it awaits.
 *
 * On PostgreSQL the link is a TCP proxy on loopback in front of the server. On the embedded PGlite (one
 * in-process instance, no network) it wraps the instance, so that each call and each reply waits while the
 * link is cut.
 *
 * A link can also be severed for good ({@link NetworkLink.sever}): the worker behind it is as good as killed —
 * nothing it sends arrives any more, now or later, and every call it makes fails at once.
 */
import { connect, createServer, type Socket } from 'node:net';
import type { PGlite } from '@electric-sql/pglite';

/** A worker's network: up or partitioned. */
export class NetworkLink {
  private down = false;
  private dead = false;
  private held: (() => void)[] = [];
  private waiting: { resolve: () => void; reject: (error: Error) => void }[] = [];
  private readonly onSever: (() => void)[] = [];

  constructor(readonly name: string) {}

  get partitioned(): boolean {
    return this.down;
  }

  /** True once {@link sever} was called. */
  get severed(): boolean {
    return this.dead;
  }

  /** Cut the link: from now on everything sent either way is held. */
  partition(): void {
    this.down = true;
  }

  /** Restore the link and deliver everything held, in the order it was sent (a no-op once severed). */
  heal(): void {
    if (!this.down || this.dead) return;
    this.down = false;
    for (const deliver of this.held.splice(0)) deliver();
    for (const { resolve } of this.waiting.splice(0)) resolve();
  }

  /**
   * Sever the link for good, as if the process behind it were killed: what is held is dropped, calls waiting to
   * cross fail, and so does every later one; connections through it are closed. Cannot be undone.
   */
  sever(): void {
    if (this.dead) return;
    this.dead = true;
    this.down = true;
    this.held = [];
    for (const { reject } of this.waiting.splice(0)) reject(severedError(this.name));
    for (const close of this.onSever.splice(0)) close();
  }

  /** Call `close` when the link is severed (at once if it already is). */
  whenSevered(close: () => void): void {
    if (this.dead) close();
    else this.onSever.push(close);
  }

  /** Deliver now while the link is up, otherwise when it heals (never, once severed). */
  carry(deliver: () => void): void {
    if (this.dead) return;
    if (this.down) this.held.push(deliver);
    else deliver();
  }

  /** Resolves at once while the link is up, otherwise when it heals; rejects once the link is severed. */
  passage(): Promise<void> {
    if (this.dead) return Promise.reject(severedError(this.name));
    return this.down
      ? new Promise<void>((resolve, reject) => this.waiting.push({ resolve, reject }))
      : Promise.resolve();
  }
}

/** What a call over a severed link fails with: the peer is gone, and no retry will reach it. */
function severedError(name: string): Error {
  return new Error(`link ${name} is severed: the process behind it was killed`);
}

/** A proxy URL that reaches the server of `databaseUrl` over a {@link NetworkLink}. */
export interface LinkedDatabaseUrl {
  /** `databaseUrl` with host and port replaced by the proxy's. */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Put `link` between a worker and the PostgreSQL server of `databaseUrl` (a TCP server; not a Unix socket). A
 * transaction caught open by a cut keeps its locks on the server until the server ends it — fenced transactions
 * carry `idle_in_transaction_session_timeout` (a third of the lease) for exactly this case.
 */
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
    if (link.severed) {
      client.destroy();
      return;
    }
    const upstream = connect(upstreamPort, upstreamHost);
    sockets.add(client);
    sockets.add(upstream);
    forward(client, upstream);
    forward(upstream, client);
    const close = (): void => {
      // A close travels like data: across a cut link the peer learns of it only when the link heals.
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
  // Killed: every connection ends at once, both ways, and new ones are refused above.
  link.whenSevered(() => {
    for (const socket of sockets) socket.destroy();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string')
    throw new Error('database link proxy has no TCP address');
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(address.port);
  return {
    url: url.toString(),
    async close() {
      link.heal();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** PGlite methods that talk to the database: each call and each reply crosses the link. */
const PGLITE_CALLS = new Set<PropertyKey>([
  'query',
  'exec',
  'sql',
  'transaction',
  'execProtocol',
  'execProtocolRaw',
  'describeQuery',
]);

/**
 * Put `link` between a worker and the embedded PGlite: the same instance, reached over the link. A transaction is
 * one call here (PGlite runs it while holding the instance), so a cut never leaves one open.
 */
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
