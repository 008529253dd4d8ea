/**
 * A real TCP proxy on 127.0.0.1 between a worker and PostgreSQL, for fault-injection tests (DESIGN.md §8):
 *
 *   const proxy = await createTcpProxy('127.0.0.1', 5432);
 *   const url = proxy.url(databaseUrl);       // hand this to the worker under test
 *   proxy.blackhole(); … proxy.restore();      // a cut cable: nothing flows, sockets stay open
 *   proxy.delay(200);                          // 200 ms more latency per chunk, both ways
 *   proxy.delayReplies(900);                   // 900 ms more on server→client chunks only
 *   proxy.reset();                             // destroy every current connection
 *   proxy.dropReplyAfter('-- commit-me');      // the statement runs; its reply never arrives
 *   proxy.dropReplyAfter('picked', { fromNextRequest: true }); // the same, for a statement described first
 *   proxy.dropReplyAfter('"tag"', { thenMarker: '\0commit\0' }); // from the COMMIT after it: a lost commit ack
 *   proxy.resetConnection(id);                 // destroy one connection (say, the one whose reply was dropped)
 *   await proxy.close();
 *
 * A cut is modelled as TCP experiences one: while blackholed, the proxy stops reading and writing in both
 * directions, so bytes sent in that time wait (in the proxy and in the kernel's socket buffers, as TCP would
 * retransmit them) and are delivered in order after `restore()`. Dropping them instead would corrupt the
 * PostgreSQL byte stream, which a real cut of a few seconds never does; to model a connection the cut killed,
 * call `reset()`.
 */
import { once } from 'node:events';
import { createServer, connect, type Server, type Socket } from 'node:net';

/** One client connection through the proxy and its upstream twin. */
interface Connection {
  readonly id: number;
  readonly client: Socket;
  readonly upstream: Socket;
  readonly toServer: Pipe;
  readonly toClient: Pipe;
  /** Set once `dropReplyAfter`'s marker was seen on this connection: replies are discarded from then on. */
  repliesDropped: boolean;
  /** Set once a `fromNextRequest` marker was seen: the client's next bytes start dropping replies. */
  dropFromNextRequest: boolean;
  /** The tail of client bytes already scanned, so a marker split across chunks is still found. */
  scanTail: string;
  /** Set once a `thenMarker` rule's marker was seen: replies drop from the client bytes that carry `thenMarker`. */
  pendingThen: { readonly thenMarker: string; readonly rule: { trip(id: number): void } } | undefined;
}

/** A handle on an armed `dropReplyAfter`. */
export interface DropReplyRule {
  /** Resolves with the connection id the first time the marker is seen. */
  readonly tripped: Promise<number>;
  /** How many connections have tripped so far. */
  readonly trippedCount: () => number;
}

export interface DropReplyOptions {
  /**
   * Let the reply to the request that carried the marker through, and drop from the client's next request on.
   * For a statement with parameters sent unprepared (`prepare=false`), postgres.js first sends its SQL alone
   * (Parse, Describe, Flush) and only after that reply the Bind and Execute that run it: a marker in the SQL
   * text is seen one round before the statement executes. @defaultValue false
   */
  readonly fromNextRequest?: boolean;
  /**
   * Arm on `marker`, but drop from the first later client bytes on that connection that contain `thenMarker`:
   * e.g. the marker names a value a transaction's statement carries, and `'\0commit\0'` (a COMMIT sent as text,
   * `prepare=false`) is where the transaction's outcome becomes unknown to the client. @defaultValue none
   */
  readonly thenMarker?: string;
}

/**
 * `databaseUrl` with `prepare=false`: the client sends every statement as unnamed text, so the SQL (and a
 * transaction's `COMMIT`, as the marker `'\0commit\0'`) travels on the wire where `dropReplyAfter` can find it.
 */
export function unprepared(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  url.searchParams.set('prepare', 'false');
  return url.toString();
}

export interface TcpProxy {
  /** The local port the proxy listens on (127.0.0.1). */
  readonly port: number;
  /** `databaseUrl` with its host and port replaced by the proxy's; user, password, database and query kept. */
  url(databaseUrl: string): string;
  /** Stop forwarding both ways on every current and future connection; sockets stay open (a cut cable). */
  blackhole(): void;
  /** End a blackhole and any delay, disarm `dropReplyAfter` for new markers; held bytes flow in order. */
  restore(): void;
  /** Add `ms` of latency to every chunk, both directions (0 removes it). Order is kept. */
  delay(ms: number): void;
  /**
   * Add `ms` of latency to every server→client chunk only (on top of `delay`; 0 removes it): requests reach the
   * server at once, their replies arrive late (a grant that is old when it arrives). Order is kept.
   */
  delayReplies(ms: number): void;
  /** Destroy every current connection (both sockets); new connections are accepted as usual. */
  reset(): void;
  /**
   * Forward client→server as usual, but once a connection's client bytes contain `marker`, discard everything
   * the server sends back on that connection: the statement (or COMMIT) runs, the client never hears of it.
   * Applies to current and future connections until `restore()`.
   */
  dropReplyAfter(marker: string, options?: DropReplyOptions): DropReplyRule;
  /** Destroy one connection (both sockets), e.g. the one a `dropReplyAfter` rule tripped on. @returns false if gone. */
  resetConnection(id: number): boolean;
  /** Connections open now. */
  readonly connectionCount: () => number;
  /** Whether the proxy is blackholed now. */
  readonly isBlackholed: () => boolean;
  /** Stop listening and destroy every connection. Idempotent. */
  close(): Promise<void>;
}

/**
 * One direction of one connection. Reads are paused while blackholed (backpressure into the kernel, like a
 * stalled TCP window) and chunks are released no earlier than `delayMs` after they were read.
 */
class Pipe {
  private readonly queue: { chunk: Buffer; dueMs: number }[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly from: Socket,
    private readonly to: Socket,
    private readonly state: ProxyState,
    private readonly replies = false,
  ) {}

  push(chunk: Buffer): void {
    const delayMs = this.state.delayMs + (this.replies ? this.state.replyDelayMs : 0);
    this.queue.push({ chunk, dueMs: performance.now() + delayMs });
    this.pump();
  }

  /** Write every chunk that is due, unless blackholed; re-arm a timer for the next one. */
  pump(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.state.blackholed) {
      this.from.pause();
      return;
    }
    this.from.resume();
    while (this.queue.length > 0) {
      const head = this.queue[0] as { chunk: Buffer; dueMs: number };
      const waitMs = head.dueMs - performance.now();
      if (waitMs > 0) {
        this.timer = setTimeout(() => this.pump(), waitMs);
        return;
      }
      this.queue.shift();
      if (!this.to.destroyed) this.to.write(head.chunk);
    }
  }

  stop(): void {
    clearTimeout(this.timer);
    this.queue.length = 0;
  }
}

interface ProxyState {
  blackholed: boolean;
  delayMs: number;
  replyDelayMs: number;
  dropMarkers: {
    marker: string;
    fromNextRequest: boolean;
    thenMarker: string | undefined;
    rule: { trip(id: number): void };
  }[];
}

/** Start a proxy on 127.0.0.1 (a free port) that forwards every connection to `targetHost:targetPort`. */
export async function createTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const state: ProxyState = { blackholed: false, delayMs: 0, replyDelayMs: 0, dropMarkers: [] };
  const connections = new Map<number, Connection>();
  let nextId = 1;
  let closed: Promise<void> | undefined;

  const destroy = (c: Connection): void => {
    if (!connections.delete(c.id)) return;
    c.toServer.stop();
    c.toClient.stop();
    c.client.destroy();
    c.upstream.destroy();
  };

  const scanForMarkers = (c: Connection, chunk: Buffer): void => {
    if (c.repliesDropped || c.dropFromNextRequest) return;
    if (state.dropMarkers.length === 0 && !c.pendingThen) return;
    // latin1 maps bytes 1:1 to characters, so markers split across chunks are found in the joined tail.
    let text = c.scanTail + chunk.toString('latin1');
    if (!c.pendingThen) {
      for (const { marker, rule, fromNextRequest, thenMarker } of state.dropMarkers) {
        const at = text.indexOf(marker);
        if (at < 0) continue;
        if (thenMarker !== undefined) {
          c.pendingThen = { thenMarker, rule };
          text = text.slice(at + marker.length);
          break;
        }
        if (fromNextRequest) c.dropFromNextRequest = true;
        else c.repliesDropped = true;
        rule.trip(c.id);
        return;
      }
    }
    if (c.pendingThen && text.includes(c.pendingThen.thenMarker)) {
      c.repliesDropped = true;
      c.pendingThen.rule.trip(c.id);
      c.pendingThen = undefined;
      return;
    }
    const keep = Math.max(
      0,
      ...state.dropMarkers.map((d) => d.marker.length - 1),
      (c.pendingThen?.thenMarker.length ?? 0) - 1,
    );
    c.scanTail = keep === 0 ? '' : text.slice(-keep);
  };

  const server: Server = createServer((client) => {
    const upstream = connect({ host: targetHost, port: targetPort });
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const id = nextId++;
    const connection: Connection = {
      id,
      client,
      upstream,
      toServer: new Pipe(client, upstream, state),
      toClient: new Pipe(upstream, client, state, true),
      repliesDropped: false,
      dropFromNextRequest: false,
      scanTail: '',
      pendingThen: undefined,
    };
    connections.set(id, connection);
    client.on('data', (chunk: Buffer) => {
      if (connection.dropFromNextRequest) {
        connection.dropFromNextRequest = false;
        connection.repliesDropped = true;
      }
      scanForMarkers(connection, chunk);
      connection.toServer.push(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (connection.repliesDropped) return;
      connection.toClient.push(chunk);
    });
    // Either side closing or failing ends both: the proxy is transparent to connection loss.
    for (const socket of [client, upstream]) {
      socket.on('error', () => destroy(connection));
      socket.on('close', () => destroy(connection));
    }
    if (state.blackholed) {
      client.pause();
      upstream.pause();
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address !== 'object') throw new Error('tcp proxy: no listening address');
  const port = address.port;

  const pumpAll = (): void => {
    for (const c of connections.values()) {
      c.toServer.pump();
      c.toClient.pump();
    }
  };

  return {
    port,
    url(databaseUrl: string): string {
      const parsed = new URL(databaseUrl);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    blackhole(): void {
      state.blackholed = true;
      pumpAll();
    },
    restore(): void {
      state.blackholed = false;
      state.delayMs = 0;
      state.replyDelayMs = 0;
      state.dropMarkers = [];
      for (const c of connections.values()) c.pendingThen = undefined;
      pumpAll();
    },
    delay(ms: number): void {
      if (!(ms >= 0)) throw new RangeError(`delay must be ≥ 0 ms, got ${ms}`);
      state.delayMs = ms;
    },
    delayReplies(ms: number): void {
      if (!(ms >= 0)) throw new RangeError(`reply delay must be ≥ 0 ms, got ${ms}`);
      state.replyDelayMs = ms;
    },
    reset(): void {
      for (const c of [...connections.values()]) destroy(c);
    },
    resetConnection(id: number): boolean {
      const c = connections.get(id);
      if (c) destroy(c);
      return c !== undefined;
    },
    dropReplyAfter(marker: string, options: DropReplyOptions = {}): DropReplyRule {
      if (marker.length === 0) throw new RangeError('dropReplyAfter: marker must not be empty');
      let count = 0;
      let resolve!: (id: number) => void;
      const tripped = new Promise<number>((r) => (resolve = r));
      state.dropMarkers.push({
        marker,
        fromNextRequest: options.fromNextRequest ?? false,
        thenMarker: options.thenMarker,
        rule: {
          trip(id) {
            count++;
            resolve(id);
          },
        },
      });
      return { tripped, trippedCount: () => count };
    },
    connectionCount: () => connections.size,
    isBlackholed: () => state.blackholed,
    close(): Promise<void> {
      return (closed ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const c of [...connections.values()]) destroy(c);
        await stopped;
      })());
    },
  };
}
