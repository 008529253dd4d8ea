/**
 * Candidate shapes of the claimable set, side by side (packages/engine/src/schema/STORAGE.md, "The claimable set"):
 * how many buffers one claim reads, and how much WAL and how many HOT updates a job costs, with and without a held
 * MVCC horizon (another session keeping a transaction with an assigned xid open while the jobs run). Counts, not
 * times, so a shared, noisy machine gives the same answer:
 *
 * - `in-place`: today's shape — the claim index is a partial index of the wide job row (`status` in its
 *   predicate, the due time its key), so the claim and the completion rewrite the row and its index entries;
 * - `ready`: the wide row has only its primary key; a narrow `ready` row (queue, priority, due, job) holds what a
 *   claim needs, updated by the claim (its due becomes the lease's end) and deleted by the completion, so the
 *   wide row's updates are HOT;
 * - `rotated`: `ready` split in three list partitions by a slot number; rows are written to the current slot,
 *   a claim moves its row there, and every 2,000 jobs (ROTATE_EVERY) the oldest slot, emptied of stragglers
 *   first, is truncated and becomes current — dead index entries live at most two rotations.
 *
 * J jobs are enqueued, claimed and completed in batches of B (one statement each), the job rows at fillfactor F.
 * At the end B more are enqueued and the pick of one claim of B (its locking SELECT) is EXPLAINed (ANALYZE,
 * BUFFERS) and rolled back: its shared buffers (hit + read) are the walk. Sequential and bitmap scans are off, as
 * a claim on a large table reads its index in order; on these small tables the planner would sometimes not.
 * WAL is read with pg_walinspect for this probe's relations only (wal-records.ts; needs a superuser). Run it in a
 * database nobody else writes to, as others' long transactions would hold the horizon in the runs "without" too:
 *
 *   cd test && DATABASE_URL=postgres://postgres@127.0.0.1:5432/storage_peerbench npx tsx --conditions=@palisade/source bench/claim-shapes.ts 20000 100 70 [in-place,ready,rotated]
 */
import postgres from '@palisade/engine/postgres';
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

type Shape = 'in-place' | 'ready' | 'rotated';
const SHAPES: readonly Shape[] = ['in-place', 'ready', 'rotated'];

/** Jobs between two rotations of the `rotated` shape (a multiple of the batch size). */
const ROTATE_EVERY = Number(process.env.ROTATE_EVERY ?? 2_000);

const JOB_COLUMNS = `id uuid PRIMARY KEY, queue text NOT NULL, name text NOT NULL, priority int NOT NULL,
  status text NOT NULL, due_at timestamptz, slot smallint, attempt int NOT NULL DEFAULT 0, token bigint, nonce uuid,
  lease_until timestamptz, worker text, input jsonb, output jsonb`;
const READY_COLUMNS =
  'queue text NOT NULL, priority int NOT NULL, due_at timestamptz NOT NULL, job_id uuid NOT NULL';
const READY_KEY = '(queue, priority DESC, due_at, job_id)';

function ddl(shape: Shape, fillfactor: number): string {
  const jobs = `CREATE TABLE jobs (${JOB_COLUMNS}) WITH (fillfactor = ${fillfactor}); CREATE SEQUENCE tok;`;
  if (shape === 'in-place')
    return `${jobs} CREATE INDEX jobs_claim ON jobs (queue, priority DESC, due_at)
                    WHERE status IN ('scheduled', 'running');`;
  if (shape === 'ready')
    return `${jobs} CREATE TABLE ready (${READY_COLUMNS}); CREATE UNIQUE INDEX ready_key ON ready ${READY_KEY};`;
  return `${jobs} CREATE TABLE ring (cur smallint NOT NULL); INSERT INTO ring VALUES (0);
    CREATE TABLE ready (${READY_COLUMNS}, slot smallint NOT NULL) PARTITION BY LIST (slot);
    CREATE TABLE ready_0 PARTITION OF ready FOR VALUES IN (0); CREATE TABLE ready_1 PARTITION OF ready FOR VALUES IN (1);
    CREATE TABLE ready_2 PARTITION OF ready FOR VALUES IN (2); CREATE UNIQUE INDEX ready_key ON ready ${READY_KEY.replace(')', ', slot)')};`;
}

/** Enqueue B jobs due now: the wide rows, and (ready shapes) their ready rows, in one statement. */
function enqueue(shape: Shape, b: number): string {
  const jobs = `INSERT INTO jobs (id, queue, name, priority, status, due_at, slot, input)
    SELECT gen_random_uuid(), 'q', 'noop', 0, 'scheduled', now(), ${shape === 'rotated' ? '(SELECT cur FROM ring)' : 'NULL'}, '{}'
      FROM generate_series(1, ${b}) RETURNING id, queue, priority, due_at, slot`;
  if (shape === 'in-place') return jobs;
  return `WITH j AS (${jobs}) INSERT INTO ready SELECT queue, priority, due_at, id${shape === 'rotated' ? ', slot' : ''} FROM j`;
}

/** The claim's pick: B due jobs, locked SKIP LOCKED, off the claim index — the walk this probe counts. */
function pick(shape: Shape, b: number): string {
  return shape === 'in-place'
    ? `SELECT id FROM jobs WHERE queue = 'q' AND status IN ('scheduled', 'running') AND due_at <= now()
        ORDER BY priority DESC, due_at LIMIT ${b} FOR NO KEY UPDATE SKIP LOCKED`
    : `SELECT job_id, ctid FROM ready WHERE queue = 'q' AND due_at <= now()
        ORDER BY priority DESC, due_at LIMIT ${b} FOR UPDATE SKIP LOCKED`;
}

/** Claim B due jobs ({@link pick}): grant each a token and a 30 s lease. */
function claim(shape: Shape, b: number): string {
  const grant = `status = 'running', attempt = j.attempt + 1, token = nextval('tok'), nonce = gen_random_uuid(),
    lease_until = now() + interval '30 s', worker = 'w'`;
  if (shape === 'in-place')
    return `WITH p AS (${pick(shape, b)})
            UPDATE jobs j SET ${grant}, due_at = now() + interval '30 s' FROM p WHERE j.id = p.id RETURNING j.id`;
  const slot = shape === 'rotated' ? ', slot = (SELECT cur FROM ring)' : '';
  return `WITH p AS (${pick(shape, b)}),
          r AS (UPDATE ready SET due_at = now() + interval '30 s'${slot} FROM p
                 WHERE ready.ctid = p.ctid AND ready.job_id = p.job_id
                RETURNING ready.job_id, ready.due_at${shape === 'rotated' ? ', ready.slot' : ''})
          UPDATE jobs j SET ${grant}, due_at = r.due_at${shape === 'rotated' ? ', slot = r.slot' : ''}
            FROM r WHERE j.id = r.job_id RETURNING j.id`;
}

/** Complete the given jobs: the wide row's outcome, and (ready shapes) the ready row's deletion, by its key. */
function complete(shape: Shape): string {
  if (shape === 'in-place')
    return `UPDATE jobs SET status = 'completed', output = '{}', due_at = NULL, lease_until = NULL
             WHERE id = ANY($1::uuid[])`;
  return `WITH j AS (UPDATE jobs SET status = 'completed', output = '{}', lease_until = NULL WHERE id = ANY($1::uuid[])
                     RETURNING id, queue, priority, due_at, slot)
          DELETE FROM ready r USING j WHERE r.queue = j.queue AND r.priority = j.priority AND r.due_at = j.due_at
                                        AND r.job_id = j.id${shape === 'rotated' ? ' AND r.slot = j.slot' : ''}`;
}

/** Rotated: the oldest slot's stragglers move to the current one, it is truncated and becomes current. */
async function rotate(db: postgres.Sql) {
  const [ring] = await db<{ cur: number }[]>`SELECT cur FROM ring`;
  const next = ((ring?.cur ?? 0) + 1) % 3;
  await db.unsafe(`UPDATE ready SET slot = ${ring?.cur ?? 0} WHERE slot = ${next}`);
  await db.unsafe(`TRUNCATE ready_${next}`);
  await db.unsafe(`UPDATE ring SET cur = ${next}`);
}

/** A node of an EXPLAIN (FORMAT JSON) plan, as far as this probe reads it. */
interface PlanNode {
  'Node Type'?: string;
  'Index Name'?: string;
  'Relation Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

/** The scan nodes of a plan: `Index Scan ready_0_queue_…`, `Seq Scan jobs`. */
function scans(node: PlanNode): string[] {
  const own = /Scan/.test(node['Node Type'] ?? '')
    ? [`${node['Node Type']} ${node['Index Name'] ?? node['Relation Name'] ?? ''}`]
    : [];
  return [...own, ...(node.Plans ?? []).flatMap(scans)];
}

/** WAL per job by table (a table's indexes and partitions with it; commits apart), e.g. `jobs 612, ready 540`. */
function byTable(records: readonly WalRecord[], rels: Map<string, Relation>, jobs: number): string {
  const sums = new Map<string, number>();
  for (const r of records) {
    const table =
      r.rm === 'Transaction' ? 'commits' : (rels.get(r.fn ?? '')?.table.replace(/_\d$/, '') ?? '?');
    sums.set(table, (sums.get(table) ?? 0) + aligned(r.len));
  }
  return [...sums].map(([t, b]) => `${t} ${Math.round(b / jobs)}`).join(', ');
}

interface Outcome {
  shape: Shape;
  horizon: boolean;
  buffers: number;
  scans: string;
  walPerJob: number;
  walByTable: string;
  hotShare: string;
}

async function probe(
  url: string,
  shape: Shape,
  horizon: boolean,
  { jobs, batch, fillfactor }: { jobs: number; batch: number; fillfactor: number },
): Promise<Outcome> {
  const schema = `claimshape_${process.pid}`;
  const db = postgres(url, {
    max: 1,
    onnotice: () => undefined,
    connection: { search_path: schema, enable_seqscan: 'off', enable_bitmapscan: 'off' },
  });
  const admin = postgres(url, { max: 2, onnotice: () => undefined });
  const inspect = await openInspector(url);
  const slot = await holdWal(url, `${schema}_slot`);
  const holder = await admin.reserve();
  try {
    await admin.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
    await db.unsafe(ddl(shape, fillfactor));
    const dbOid = await databaseOid(admin);
    if (horizon) {
      await holder`BEGIN`;
      await holder`SELECT txid_current()`; // an assigned xid, held open: nothing newer can be removed
    }
    const rels = new Map<string, Relation>();
    const remember = async () => {
      for (const [k, v] of await relationMap(admin, (s) => s === schema)) rels.set(k, v);
    };
    await remember();
    const from = await insertLsn(admin);
    for (let done = 0; done < jobs; done += batch) {
      await db.unsafe(enqueue(shape, batch));
      const claimed = await db.unsafe<{ id: string }[]>(claim(shape, batch));
      await db.unsafe(complete(shape), [claimed.map((c) => c.id)]);
      if (shape === 'rotated' && (done + batch) % ROTATE_EVERY === 0) {
        await remember();
        await rotate(db);
      }
    }
    const to = await flushLsn(admin);
    await remember();
    await db.unsafe(enqueue(shape, batch));
    // One claim's pick, measured and rolled back (the connection is this client's only one).
    await db.unsafe('BEGIN');
    await db.unsafe('ANALYZE'); // the planner sees the tables as autovacuum's ANALYZE would show them
    const [row] = await db.unsafe<{ 'QUERY PLAN': [{ Plan: PlanNode }] }[]>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${pick(shape, batch)}`,
    );
    await db.unsafe('ROLLBACK');
    const plan: PlanNode = row?.['QUERY PLAN'][0].Plan ?? {};
    const records = ownRecords(await walRecords(inspect, from, to, dbOid), rels, dbOid);
    const jobUpdates = records.filter((r) => rels.get(r.fn ?? '')?.name === 'jobs' && /UPDATE/.test(r.type));
    const hot = jobUpdates.filter((r) => r.type.startsWith('HOT_UPDATE')).length;
    return {
      shape,
      horizon,
      buffers: (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0),
      scans: [...new Set(scans(plan))].join(', '),
      walPerJob: Math.round(walTotals(records).bytes / jobs),
      walByTable: byTable(records, rels, jobs),
      hotShare: jobUpdates.length > 0 ? `${Math.round((100 * hot) / jobUpdates.length)} %` : '–',
    };
  } finally {
    if (horizon) await holder`ROLLBACK`.catch(() => undefined);
    holder.release();
    await db.end();
    await admin.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
    await inspect.end();
    await slot.release();
  }
}

async function main() {
  const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const jobs = Number(process.argv[2] ?? 20_000);
  const batch = Number(process.argv[3] ?? 100);
  const fillfactor = Number(process.argv[4] ?? 70);
  const only = process.argv[5]?.split(',') ?? SHAPES;
  const out = [
    `### claimable-set shapes: ${jobs} jobs in batches of ${batch}, job rows at fillfactor ${fillfactor}`,
    '',
    `| shape | held horizon | buffers read by one pick of ${batch} | its scans | WAL per job (B) | by table | HOT share of job-row updates |`,
    '|---|---|--:|---|--:|---|--:|',
  ];
  for (const shape of SHAPES.filter((s) => only.includes(s)))
    for (const horizon of [false, true]) {
      const o = await probe(url, shape, horizon, { jobs, batch, fillfactor });
      out.push(
        `| ${o.shape} | ${o.horizon ? 'yes' : 'no'} | ${o.buffers} | ${o.scans} | ${o.walPerJob} | ${o.walByTable} | ${o.hotShare} |`,
      );
      process.stderr.write(`claim-shapes: ${shape}, horizon ${horizon}: ${o.buffers} buffers\n`);
    }
  process.stdout.write(out.join('\n') + '\n');
}

main().then(
  () => undefined,
  (error: unknown) => {
    process.stderr.write(
      `claim-shapes: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  },
);
