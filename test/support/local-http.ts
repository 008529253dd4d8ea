/**
 * Local HTTP servers for test stubs (./payment-stub.ts, ./flaky-service.ts): listening on 127.0.0.1 at a free
 * port, with short keep-alive, and a close that ends every connection at once.
 */
import { once } from 'node:events';
import type { Server } from 'node:http';

export interface LocalHttp {
  /** `http://127.0.0.1:<port>`, no trailing slash. */
  readonly origin: string;
  /** Close every connection and stop listening; idempotent (every call returns the same promise). */
  readonly close: () => Promise<void>;
}

/** Start `server` on 127.0.0.1 at a free port. Throws if it has no address; `what` names the stub in that error. */
export async function listenLocally(server: Server, what: string): Promise<LocalHttp> {
  server.keepAliveTimeout = 1_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address !== 'object') throw new Error(`${what}: no address`);
  let closed: Promise<void> | undefined;
  return {
    origin: `http://127.0.0.1:${address.port}`,
    close: () =>
      (closed ??= new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      })),
  };
}
