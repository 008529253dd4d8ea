import { PGlite } from '@electric-sql/pglite';
import { pino } from 'pino';
import { createEngine, openEmbeddedDatabase, type CreateEngineOptions, type Engine } from '@palisade/engine';
import {
  pgliteAppDatabase,
  postgresAppDatabase,
  type AppDatabase,
} from '../invoice-settlement/app-database.js';
import { quoteIdent } from '../invoice-settlement/tables.js';
import { NetworkLink, linkPglite, linkPostgres } from './network-link.js';

/** What a demo runs on: its main engine, one engine per worker behind its own network link, the app's database. */
export interface DemoResources {
  readonly main: Engine;
  /** By worker id: each worker's engine, whose connections go through `links.get(id)`. */
  readonly workerEngines: Map<string, Engine>;
  readonly links: Map<string, NetworkLink>;
  readonly app: AppDatabase;
  /** Closers, in the order they were opened (run in reverse). */
  readonly close: (() => Promise<void>)[];
}

/**
 * Open a demo's engines in `schema`: on the PostgreSQL server of `databaseUrl` (each worker's engine through a TCP
 * proxy its link can cut), or else on one embedded database — in memory, or file-backed in `dataDir` under the
 * engine's one-process lock (kept for `palisade runs show`) — each worker's engine through its link.
 * @param applicationName the app database's connection name on PostgreSQL.
 */
export async function openDemoResources(p: {
  readonly databaseUrl: string | undefined;
  readonly schema: string;
  readonly dataDir: string | undefined;
  readonly workerIds: readonly string[];
  readonly applicationName: string;
}): Promise<DemoResources> {
  const logger = pino({ level: 'silent' });
  const links = new Map(p.workerIds.map((id) => [id, new NetworkLink(id)] as const));
  const close: (() => Promise<void>)[] = [];
  const workerEngines = new Map<string, Engine>();
  const base: CreateEngineOptions = { schema: p.schema, logger };
  try {
    if (p.databaseUrl) {
      const databaseUrl = p.databaseUrl;
      const main = await createEngine({ ...base, databaseUrl });
      close.push(() => main.close({ graceMs: 0 }));
      const app = postgresAppDatabase(databaseUrl, p.applicationName);
      close.push(() => app.close());
      for (const [id, link] of links) {
        const proxy = await linkPostgres(link, databaseUrl);
        close.push(() => proxy.close());
        const engine = await createEngine({ ...base, databaseUrl: proxy.url, migrate: false, poolSize: 4 });
        close.push(() => engine.close({ graceMs: 0 }));
        workerEngines.set(id, engine);
      }
      return { main, workerEngines, links, app, close };
    }
    const embedded = p.dataDir === undefined ? undefined : await openEmbeddedDatabase(p.dataDir);
    const pglite = embedded?.pglite ?? new PGlite();
    close.push(() => embedded?.close() ?? pglite.close());
    const main = await createEngine({ ...base, pglite });
    close.push(() => main.close({ graceMs: 0 }));
    const app = pgliteAppDatabase(pglite);
    for (const [id, link] of links) {
      const engine = await createEngine({ ...base, pglite: linkPglite(link, pglite), migrate: false });
      close.push(() => engine.close({ graceMs: 0 }));
      workerEngines.set(id, engine);
    }
    return { main, workerEngines, links, app, close };
  } catch (error) {
    for (const step of close.reverse()) await step().catch(() => undefined);
    throw error;
  }
}

/**
 * Close what {@link openDemoResources} opened: heal every link, close the engines (workers stop claiming and
 * release their pools), then `provider`, then drop `dropSchemas` (on PostgreSQL), then the rest.
 */
export async function closeDemoResources(
  resources: DemoResources,
  provider: { close(): Promise<void> } | undefined,
  dropSchemas: readonly string[],
): Promise<void> {
  for (const link of resources.links.values()) link.heal();
  await Promise.all(
    [...resources.workerEngines.values(), resources.main].map((e) => e.close({ graceMs: 0 })),
  );
  await provider?.close();
  if (resources.app.driver === 'postgres' && dropSchemas.length > 0) {
    await resources.app.run(dropSchemas.map((s) => `DROP SCHEMA IF EXISTS ${quoteIdent(s)} CASCADE`));
  }
  for (const step of [...resources.close].reverse()) await step();
}
