import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { pino } from 'pino';
import {
  createEngine,
  openEmbeddedDatabase,
  type CreateEngineOptions,
  type Engine,
  type RunDetails,
} from '@palisade/engine';
import { createTranscodingActivities } from './activities.js';
import { stalledStepHistory, verifyTranscoding, type DemoCheck, type VerifiedOutput } from './checks.js';
import { FFMPEG_VERSION, probeMedia } from './ffmpeg.js';
import { NetworkLink, linkPglite, linkPostgres } from '../shared/network-link.js';
import { linkStore } from './store-link.js';
import { ObjectStore, type StoreClient } from './object-store.js';
import type { Rendition, TranscodeJob, TranscodeResult } from './schemas.js';
import { StallFault, type StallRecord } from './stall-fault.js';
import {
  pgliteStoreDatabase,
  postgresStoreDatabase,
  quoteIdent,
  type StoreDatabase,
} from './store-database.js';
import { ensureTestClip, testClipName } from './test-clip.js';
import { Timeline } from './timeline.js';
import { createTranscodeWorkflow } from './workflow.js';

/** Options of {@link runTranscodingDemo}. */
export interface TranscodingDemoOptions {
  /** A PostgreSQL server to run on. @defaultValue the embedded database (an in-memory PGlite, or `dataDir`) */
  readonly databaseUrl?: string;
  /** Where each line of the live timeline goes. @defaultValue `console.log` */
  readonly log?: (line: string) => void;
  /**
   * Holds the generated input clip (`input/`, reused across runs) and each run's object store, outputs and worker
   * scratch directories (`runs/<jobId>/`): ffmpeg works on files. `pnpm demo` gives a temporary directory it
   * removes. @defaultValue `.palisade/transcoding` under the working directory
   */
  readonly workDir?: string;
  /** Schema of the engine's tables; the store's are in `<schema>_store`. @defaultValue `transcoding_<random>` */
  readonly schema?: string;
  /**
   * Without `databaseUrl`: a directory for a file-backed embedded database (locked to this process), e.g. to open
   * the runs with `palisade runs show --data-dir` afterwards. @defaultValue none: in memory
   */
  readonly dataDir?: string;
  /** Keep both schemas after the run, e.g. to inspect them with `palisade runs show`. @defaultValue false */
  readonly keepSchema?: boolean;
}

/** What {@link runTranscodingDemo} found. */
export interface TranscodingDemoResult {
  /** True when every check passed. */
  readonly ok: boolean;
  readonly database: 'postgres' | 'pglite';
  readonly runId: string | undefined;
  readonly jobId: string;
  readonly checks: readonly DemoCheck[];
  /** The assembled files, as found in the store. */
  readonly outputs: readonly VerifiedOutput[];
  readonly stall: StallRecord | undefined;
  readonly timingsMs: {
    readonly setup: number;
    readonly run: number;
    readonly verify: number;
    readonly total: number;
  };
}

/** The demo's fixed scenario. */
export const TRANSCODING_DEMO = Object.freeze({
  workers: Object.freeze(['worker-1', 'worker-2', 'worker-3']),
  segmentSeconds: 2,
  renditions: Object.freeze<Rendition[]>([
    { name: '240p', height: 240, videoKbps: 400, audioKbps: 64 },
    { name: '120p', height: 120, videoKbps: 120, audioKbps: 48 },
  ]),
  /** The transcode whose first upload stalls. */
  stalled: Object.freeze({ segment: 1, rendition: '240p' }),
  /**
   * Lease of every activity attempt (ms): the production floor, so the demo needs no test-only timings. The
   * worker renews every third of it and gives each renewal as long to answer; the stalled attempt's lease runs
   * out at most this long after its last renewal.
   */
  leaseMs: 3_000,
  /** Polling fallback of every worker (wake-ups come by LISTEN/NOTIFY; reclaims of expired leases by polling). */
  pollIntervalMs: 250,
  /** How far an output's duration may be from the input's (s). */
  durationToleranceS: 0.25,
  /** Give up on the run after this long (ms). */
  runTimeoutMs: 90_000,
});

interface Resources {
  readonly main: Engine;
  readonly workers: Map<string, Engine>;
  readonly links: Map<string, NetworkLink>;
  readonly storeDatabase: StoreDatabase;
  readonly close: (() => Promise<void>)[];
}

/**
 * Run the transcoding example end to end and check it: a workflow probes a real clip, splits it, transcodes every
 * segment to two renditions on three workers, and assembles the outputs and a manifest in a fenced object store.
 * One worker's network is cut just as it uploads a transcoded segment: its lease expires, another worker
 * reclaims the step with a higher token and uploads, and when the network heals the stale upload is refused by
 * the store. The checks read the engine's records, the store's manifest and the output files themselves.
 * Prints a live timeline through `log`; never throws for a failed check (see `ok` and `checks`).
 */
export async function runTranscodingDemo(
  options: TranscodingDemoOptions = {},
): Promise<TranscodingDemoResult> {
  const log = options.log ?? ((line: string) => console.log(line));
  const timeline = new Timeline(log);
  const demo = TRANSCODING_DEMO;
  const databaseUrl = options.databaseUrl || undefined;
  const database = databaseUrl ? 'postgres' : 'pglite';
  const workDir = resolve(options.workDir ?? join(process.cwd(), '.palisade', 'transcoding'));
  const jobId = `clip-${randomBytes(3).toString('hex')}`;
  const schema = options.schema ?? `transcoding_${randomBytes(4).toString('hex')}`;
  const runDir = join(workDir, 'runs', jobId);
  const shortKey = (key: string): string => key.split('/').slice(2).join('/');

  const clip = join(workDir, 'input', testClipName());
  const generated = await ensureTestClip(clip);
  const input = await probeMedia(clip);
  timeline.line(
    'input',
    `${generated ? 'generated' : 'reusing'} ${clip}: ${input.durationS.toFixed(2)} s, ` +
      input.streams.map((s) => `${s.codec}${s.width ? ` ${s.width}x${s.height}` : ''}`).join(' + ') +
      ` (ffmpeg ${FFMPEG_VERSION} from @ffmpeg-installer/ffmpeg)`,
  );

  const dataDir = options.dataDir === undefined ? undefined : resolve(options.dataDir);
  const resources = await openResources(databaseUrl ?? { dataDir }, schema);
  const stallKey = `jobs/${jobId}/${demo.stalled.rendition}/seg-${String(demo.stalled.segment).padStart(3, '0')}.mp4`;
  let result: TranscodeResult | undefined;
  let fault: StallFault | undefined;
  let runId: string | undefined;
  const setupMs = timeline.elapsedMs();
  let runMs = 0;
  try {
    const store = await ObjectStore.open({ dir: join(runDir, 'store'), database: resources.storeDatabase });
    timeline.watchStore(store, shortKey);
    const stallFault = new StallFault({ key: stallKey, links: resources.links, store, timeline });
    fault = stallFault;
    const clients = new Map<string, StoreClient>(
      [...resources.links].map(([id, link]) => [
        id,
        linkStore(store, link, { writer: id, onUpload: stallFault.onUpload }),
      ]),
    );
    const activities = createTranscodingActivities(
      {
        store: (workerId) => {
          const client = clients.get(workerId);
          if (!client) throw new Error(`no store client for worker ${workerId}`);
          return client;
        },
        scratchDir: (workerId) => join(runDir, 'workers', workerId),
        onEvent: (event) => timeline.activity(event),
      },
      { leaseMs: demo.leaseMs },
    );
    const workflow = createTranscodeWorkflow(activities);
    const orchestrator = resources.main.worker({
      workerId: 'orchestrator',
      workflows: [workflow],
      pollIntervalMs: demo.pollIntervalMs,
    });
    const workers = [...resources.workers].map(([workerId, engine]) => {
      const worker = engine.worker({
        workerId,
        activities: Object.values(activities),
        concurrency: 1,
        pollIntervalMs: demo.pollIntervalMs,
        heartbeatIntervalMs: Math.floor(demo.leaseMs / 3),
        // As long as the interval (the default is half): a loaded 2-core machine can take a while to answer.
        heartbeatTimeoutMs: Math.floor(demo.leaseMs / 3),
      });
      timeline.watchWorker(worker, workerId);
      return worker;
    });
    await Promise.all([orchestrator.start(), ...workers.map((w) => w.start())]);
    timeline.line(
      'setup',
      `${database === 'postgres' ? 'PostgreSQL' : dataDir ? `embedded PGlite in ${dataDir}` : 'in-memory embedded PGlite'}, ` +
        `schema ${schema}; ` +
        `${workers.length} workers × 1 slot, lease ${demo.leaseMs} ms (heartbeat every ${Math.floor(demo.leaseMs / 3)} ms); ` +
        `the first upload of ${shortKey(stallKey)} will stall`,
    );

    const job: TranscodeJob = {
      jobId,
      sourcePath: clip,
      segmentSeconds: demo.segmentSeconds,
      renditions: [...demo.renditions],
      realtime: true,
    };
    const runStartedMs = timeline.elapsedMs();
    const handle = await resources.main.client.start(workflow, job, { key: jobId });
    runId = handle.runId;
    timeline.line('client', `started ${workflow.name} run ${runId} for job ${jobId}`);
    try {
      result = await handle.result({ timeoutMs: demo.runTimeoutMs, pollIntervalMs: 500 });
      timeline.line(
        'client',
        `run completed: ${result.outputs.map((o) => shortKey(o.key)).join(', ')} + manifest`,
      );
    } catch (error) {
      timeline.line(
        'client',
        `run did not complete: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
    runMs = timeline.elapsedMs() - runStartedMs;
    // The zombie's upload arrives when the partition heals, which may be just after the run completed.
    await Promise.race([stallFault.settled, delay(10_000)]);
    const description = await waitForStaleHeartbeat(handle.describe.bind(handle), stallFault.record?.token);

    const verifyStartedMs = timeline.elapsedMs();
    const { checks, outputs } = await verifyTranscoding({
      result,
      description,
      store,
      stall: stallFault.record,
      input,
      renditions: demo.renditions,
      durationToleranceS: demo.durationToleranceS,
    });
    const verifyMs = timeline.elapsedMs() - verifyStartedMs;
    log('');
    log(`engine history of ${shortKey(stallKey)}'s step:`);
    for (const line of stalledStepHistory(description, stallKey)) log(`  ${line}`);
    log('');
    log(`checks (${database}):`);
    for (const c of checks) log(`  ${c.ok ? '✓' : '✗'} ${c.name} — ${c.detail}`);
    for (const o of outputs) log(`  output ${o.rendition}: ${o.path}`);
    const ok = checks.every((c) => c.ok);
    const totalMs = timeline.elapsedMs();
    log(
      `  ${ok ? 'all checks passed' : 'SOME CHECKS FAILED'} in ${(totalMs / 1000).toFixed(1)} s ` +
        `(setup ${(setupMs / 1000).toFixed(1)} s, run ${(runMs / 1000).toFixed(1)} s, verify ${(verifyMs / 1000).toFixed(1)} s)`,
    );
    return {
      ok,
      database,
      runId,
      jobId,
      checks,
      outputs,
      stall: stallFault.record,
      timingsMs: { setup: setupMs, run: runMs, verify: verifyMs, total: totalMs },
    };
  } finally {
    fault?.dispose();
    await closeResources(resources, options.keepSchema ? undefined : schema);
  }
}

async function openResources(
  database: string | { dataDir: string | undefined },
  schema: string,
): Promise<Resources> {
  const logger = pino({ level: 'silent' });
  const storeSchema = `${schema}_store`;
  const links = new Map(TRANSCODING_DEMO.workers.map((id) => [id, new NetworkLink(id)] as const));
  const close: (() => Promise<void>)[] = [];
  const workers = new Map<string, Engine>();
  const base: CreateEngineOptions = { schema, logger };
  try {
    if (typeof database === 'string') {
      const databaseUrl = database;
      const main = await createEngine({ ...base, databaseUrl });
      close.push(() => main.close({ graceMs: 0 }));
      const storeDatabase = postgresStoreDatabase(databaseUrl, storeSchema);
      close.push(() => storeDatabase.close());
      for (const [id, link] of links) {
        const proxy = await linkPostgres(link, databaseUrl);
        close.push(() => proxy.close());
        const engine = await createEngine({ ...base, databaseUrl: proxy.url, migrate: false, poolSize: 4 });
        close.push(() => engine.close({ graceMs: 0 }));
        workers.set(id, engine);
      }
      return { main, workers, links, storeDatabase, close };
    }
    // In memory, or file-backed in dataDir under the engine's one-process lock (another demo on it is refused).
    const embedded =
      database.dataDir === undefined ? undefined : await openEmbeddedDatabase(database.dataDir);
    const pglite = embedded?.pglite ?? new PGlite();
    close.push(() => embedded?.close() ?? pglite.close());
    const main = await createEngine({ ...base, pglite });
    close.push(() => main.close({ graceMs: 0 }));
    const storeDatabase = pgliteStoreDatabase(pglite, storeSchema);
    for (const [id, link] of links) {
      const engine = await createEngine({ ...base, pglite: linkPglite(link, pglite), migrate: false });
      close.push(() => engine.close({ graceMs: 0 }));
      workers.set(id, engine);
    }
    return { main, workers, links, storeDatabase, close };
  } catch (error) {
    for (const c of close.reverse()) await c().catch(() => undefined);
    throw error;
  }
}

async function closeResources(resources: Resources, dropSchema: string | undefined): Promise<void> {
  for (const link of resources.links.values()) link.heal();
  const steps = [...resources.close].reverse();
  // Engines first (workers stop, pools close), then drop the schemas while the store's pool is still open.
  const engines = new Set<Engine>([...resources.workers.values(), resources.main]);
  await Promise.all([...engines].map((e) => e.close({ graceMs: 0 })));
  if (dropSchema) {
    for (const s of [dropSchema, `${dropSchema}_store`]) {
      await resources.storeDatabase.query(`DROP SCHEMA IF EXISTS ${quoteIdent(s)} CASCADE`);
    }
  }
  for (const step of steps) await step();
}

/**
 * The run's history, once the engine recorded the zombie's late heartbeat as a stale write (it arrives with the
 * heal; if none was in flight when the network was cut there is none to record, so the wait is bounded).
 */
async function waitForStaleHeartbeat(
  describe: () => Promise<RunDetails>,
  token: bigint | undefined,
): Promise<RunDetails> {
  const deadline = performance.now() + 2_000;
  for (;;) {
    const description = await describe();
    const seen = description.events.some(
      (e) => e.type === 'attempt:stale-rejected' && token !== undefined && e.token === token.toString(),
    );
    if (seen || token === undefined || performance.now() > deadline) return description;
    await delay(100);
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
