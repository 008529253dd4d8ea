/**
 * WAL by relation and by transaction, for the storage design (packages/engine/src/schema/STORAGE.md): which tables
 * and indexes each hot statement writes, how many of its heap updates are HOT, how many row locks it logs, and how
 * many bytes and commits a unit of work costs — read from the WAL records themselves (pg_walinspect), so the work
 * of other sessions on a shared server is left out (a pg_current_wal_lsn() difference counts the whole server).
 *
 *   cd test
 *   # Palisade in this process, on a fresh schema (dropped after): N no-op jobs drained at worker concurrency C,
 *   # or N three-step workflows (the worker's default `fuseSteps`; `--fuse` / `--no-fuse` set it); the enqueue (start)
 *   # and the drain reported apart.
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx --conditions=@palisade/source bench/wal-profile.ts jobs 2000 10
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npx tsx --conditions=@palisade/source bench/wal-profile.ts workflows 300 10 --no-fuse
 *   # Any command (a peer adapter of ../shared/bench-peers), counting the WAL of the non-system relations of the
 *   # database DATABASE_URL names, divided by N units:
 *   DATABASE_URL=postgres://postgres@127.0.0.1:5432/peerbench npx tsx --conditions=@palisade/source bench/wal-profile.ts around 2000 -- <command…>
 *
 * Needs a superuser (see wal-records.ts). A record belongs to the relation of its first block reference (a table, index, TOAST relation or sequence); a
 * COMMIT record counts when its transaction wrote one of the measured relations. Bytes are record lengths rounded
 * up to 8 (MAXALIGN), without page headers; full-page images are shown apart (they depend on the last checkpoint).
 * Row counts per table (pg_stat_user_tables) are the tables' whole lives: for Palisade, this run's schema.
 */
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from '@palisade/engine/postgres';
import { createEngine, type Engine } from '@palisade/engine';
import { waitForBackendsGone } from './costs.js';
import { noopActivity, sequentialWorkflow } from './definitions.js';
import { openCountedClient } from './engine-client.js';
import { tableCounters, type TableCounters } from './meter.js';
import { countdown, inParallel } from './scenarios/context.js';
import {
  aligned,
  databaseOid,
  flushLsn,
  holdWal,
  insertLsn,
  openInspector,
  ownRecords,
  relationMap,
  walRecords,
  walTotals,
  type Relation,
  type WalRecord,
} from './wal-records.js';

const fmt = (x: number, digits = 2) => x.toFixed(digits);

/** A record's operation: heap and sequence record types as PostgreSQL names them, index records by kind. */
function operation(r: WalRecord): string {
  const type = r.type.replace('+INIT', '');
  if (r.rm !== 'Btree') return type;
  if (type === 'INSERT_LEAF' || type === 'INSERT_POST') return 'index insert';
  return /SPLIT|UPPER|NEWROOT/.test(type) ? 'index split' : `index ${type.toLowerCase()}`;
}

/** The row writes and locks that tell one statement from another (index and maintenance records left out). */
const SHAPING = new Set(['INSERT', 'MULTI_INSERT', 'UPDATE', 'HOT_UPDATE', 'DELETE', 'LOCK']);

/**
 * Print the WAL of one phase by relation and operation, and by transaction shape (the tables a transaction
 * inserted, updated, HOT-updated, deleted or locked rows of), per unit of work.
 */
function report(
  title: string,
  units: number,
  records: readonly WalRecord[],
  rels: Map<string, Relation>,
  dbOid: number,
) {
  const all = ownRecords(records, rels, dbOid);
  const rel = (r: WalRecord) => rels.get(r.fn ?? '');
  const label = (r: WalRecord) =>
    r.rm === 'Transaction' ? `(transaction) ${r.type}` : `${rel(r)?.name ?? '?'} ${operation(r)}`;
  const { bytes, fpi, commits } = walTotals(all);
  const out: string[] = [
    `### ${title}: ${units} units`,
    '',
    `WAL ${fmt(bytes / units, 0)} B per unit (${fmt((bytes - fpi) / units, 0)} B without full-page images), ` +
      `${fmt(commits / units, 3)} commits per unit, ${fmt(all.length / units, 2)} records per unit`,
    '',
    '| table | relation and operation | records per unit | B per unit | of which FPI |',
    '|---|---|--:|--:|--:|',
  ];
  const groups = new Map<string, { table: string; n: number; b: number; f: number }>();
  for (const r of all) {
    const key = label(r);
    const g = groups.get(key) ?? { table: rel(r)?.table ?? '', n: 0, b: 0, f: 0 };
    g.n++;
    g.b += aligned(r.len);
    g.f += r.fpi;
    groups.set(key, g);
  }
  for (const [key, g] of [...groups].sort((a, b) => a[1].table.localeCompare(b[1].table) || b[1].b - a[1].b))
    out.push(
      `| ${g.table} | ${key} | ${fmt(g.n / units)} | ${fmt(g.b / units, 0)} | ${fmt(g.f / units, 0)} |`,
    );
  const byXid = new Map<string, WalRecord[]>();
  for (const r of all) byXid.set(r.xid, [...(byXid.get(r.xid) ?? []), r]);
  const shapes = new Map<string, { xacts: number; b: number; counts: Map<string, number> }>();
  for (const [xid, recs] of byXid) {
    const shaping = recs.filter(
      (r) => r.rm !== 'Btree' && SHAPING.has(operation(r)) && rel(r)?.name === rel(r)?.table,
    );
    const key =
      xid === '0'
        ? '(no transaction: pruning, visibility)'
        : [...new Set(shaping.map(label))].sort().join(' · ') || '(other)';
    const s = shapes.get(key) ?? { xacts: 0, b: 0, counts: new Map<string, number>() };
    s.xacts += xid === '0' ? 0 : 1;
    s.b += recs.reduce((t, r) => t + aligned(r.len), 0);
    for (const r of recs)
      if (r.rm !== 'Transaction') s.counts.set(label(r), (s.counts.get(label(r)) ?? 0) + 1);
    shapes.set(key, s);
  }
  out.push(
    '',
    '| transaction shape | transactions per unit | B per transaction | records per transaction |',
    '|---|--:|--:|---|',
  );
  for (const [key, s] of [...shapes].sort((a, b) => b[1].b - a[1].b)) {
    const per = Math.max(s.xacts, 1);
    const recs = [...s.counts]
      .filter(([, n]) => n / per >= 0.05)
      .map(([k, n]) => `${k} ×${fmt(n / per, 1)}`)
      .join('; ');
    out.push(`| ${key} | ${fmt(s.xacts / units, 3)} | ${fmt(s.b / per, 0)} | ${recs} |`);
  }
  process.stdout.write(out.join('\n') + '\n\n');
}

function printTables(title: string, units: number, tables: TableCounters) {
  const rows = Object.entries(tables).filter(([name]) => name !== 'migrations');
  const out = [
    `### ${title}: rows per unit (pg_stat_user_tables)`,
    '',
    '| table | ins | upd | HOT upd | HOT share | del |',
    '|---|--:|--:|--:|--:|--:|',
  ];
  for (const [name, c] of rows) {
    if (c.inserted + c.updated + c.deleted === 0) continue;
    const share = c.updated > 0 ? `${fmt((100 * c.hotUpdated) / c.updated, 0)} %` : '–';
    out.push(
      `| ${name} | ${fmt(c.inserted / units)} | ${fmt(c.updated / units)} | ${fmt(c.hotUpdated / units)} | ${share} | ${fmt(c.deleted / units)} |`,
    );
  }
  process.stdout.write(out.join('\n') + '\n\n');
}

type Phase = { title: string; from: string; to: string };

/** Run Palisade: `kind` jobs or workflows, `n` of them, worker concurrency `c`; returns the phases' LSN ranges. */
async function runPalisade(
  url: string,
  admin: postgres.Sql,
  schema: string,
  kind: string,
  n: number,
  c: number,
  /** The worker's `fuseSteps`; undefined: the engine's default. */
  fuse: boolean | undefined,
) {
  const client = openCountedClient(url, { poolSize: 10, applicationName: schema });
  let engine: Engine | undefined;
  const phases: Phase[] = [];
  try {
    engine = await createEngine({ sql: client.sql, schema });
    const e = engine;
    const noop = noopActivity(30_000);
    const workflow = sequentialWorkflow(3, noop);
    let from = await insertLsn(admin);
    await inParallel(n, 50, () =>
      kind === 'jobs' ? e.client.enqueue(noop, {}) : e.client.start(workflow, {}),
    );
    phases.push({ title: kind === 'jobs' ? 'enqueue' : 'start', from, to: await flushLsn(admin) });
    const done = countdown(n, 600_000, `${n} ${kind}`);
    const worker = e.worker({
      activities: [noop],
      workflows: kind === 'jobs' ? [] : [workflow],
      concurrency: c,
      workflowConcurrency: c,
      ...(fuse === undefined ? {} : { fuseSteps: fuse }),
    });
    if (kind === 'jobs') worker.events.on('attempt:completed', () => done.tick());
    else worker.events.on('turn:committed', ({ outcome }) => outcome === 'completed' && done.tick());
    from = await insertLsn(admin);
    await worker.start();
    await done.done;
    phases.push({
      title: `drain, concurrency ${c}${fuse === undefined ? '' : fuse ? ', fuseSteps: true' : ', fuseSteps: false'}`,
      from,
      to: await flushLsn(admin),
    });
    await worker.stop({ graceMs: 0 });
    return phases;
  } finally {
    await engine?.close({ graceMs: 0 });
    await client.end();
    await waitForBackendsGone(admin, schema);
  }
}

/** Run a command, inheriting stdio; resolves with its exit code. */
function runCommand(argv: readonly string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: 'inherit' });
    child.on('error', reject);
    child.on('exit', (code) => resolve(code ?? 1));
  });
}

async function main() {
  const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const [mode, nText, cText, ...rest] = process.argv.slice(2);
  const n = Number(nText);
  if (!['jobs', 'workflows', 'around'].includes(mode ?? '') || !(n > 0)) {
    process.stderr.write(
      'usage: wal-profile.ts jobs|workflows N C [--fuse|--no-fuse] | around N -- command…\n',
    );
    return 2;
  }
  const admin = postgres(url, { max: 2, onnotice: () => undefined });
  const inspect = await openInspector(url);
  const schema = `walprof_${process.pid}`;
  const slot = await holdWal(url, schema);
  try {
    const dbOid = await databaseOid(admin);
    if (mode === 'around') {
      const argv = [cText, ...rest].filter((a) => a !== undefined && a !== '--') as string[];
      const from = await insertLsn(admin);
      const code = await runCommand(argv);
      const to = await flushLsn(admin);
      await sleep(2_000); // the command's backends report their row counts when they exit
      await admin`select pg_stat_clear_snapshot()`;
      const system = (s: string) => /^(pg_|information_schema$|public$)/.test(s);
      const rels = await relationMap(admin, (s) => !system(s));
      report(
        `around \`${argv.join(' ')}\` (exit ${code})`,
        n,
        await walRecords(inspect, from, to, dbOid),
        rels,
        dbOid,
      );
      for (const s of new Set([...rels.values()].map((r) => r.schema)))
        printTables(`schema ${s}`, n, await tableCounters(admin, s));
      return code;
    }
    const fuse = rest.includes('--no-fuse') ? false : rest.includes('--fuse') ? true : undefined;
    const phases = await runPalisade(url, admin, schema, mode!, n, Number(cText ?? 10), fuse);
    const rels = await relationMap(admin, (s) => s === schema);
    for (const p of phases)
      report(`${mode} ${p.title}`, n, await walRecords(inspect, p.from, p.to, dbOid), rels, dbOid);
    printTables(`${mode}, whole run`, n, await tableCounters(admin, schema));
    return 0;
  } finally {
    await admin.unsafe(`drop schema if exists "${schema}" cascade`);
    await inspect.end();
    await slot.release();
    await admin.end();
  }
}

main().then(
  (code) => (process.exitCode = code),
  (error: unknown) => {
    process.stderr.write(
      `wal-profile: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  },
);
