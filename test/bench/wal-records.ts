/**
 * WAL records of a set of relations, read with pg_walinspect (shared by wal-profile.ts and claim-shapes.ts): the
 * relations of some schemas by relfilenode, the records between two LSNs that touch them, and the COMMIT records
 * of the transactions that wrote them. Needs a superuser: pg_walinspect lives in a database of its own
 * (WAL_PROFILE_DB, default storage_walinspect, created when missing), and {@link holdWal} keeps the WAL of a run
 * on disk (a temporary physical replication slot) until it has been read.
 */
import postgres from '@palisade/engine/postgres';

/** One measured relation: its name and the table it belongs to (itself, for a table or sequence). */
export interface Relation {
  readonly name: string;
  readonly table: string;
  readonly schema: string;
}

export interface WalRecord {
  readonly xid: string;
  readonly rm: string;
  readonly type: string;
  readonly len: number;
  readonly fpi: number;
  readonly db: string | null;
  readonly fn: string | null;
}

export const aligned = (n: number) => Math.ceil(n / 8) * 8;

/** The relations of the schemas `schemaMatches` accepts, by relfilenode: tables, indexes, TOAST, sequences. */
export async function relationMap(db: postgres.Sql, schemaMatches: (s: string) => boolean) {
  const classes = await db<
    { oid: number; fn: string; relname: string; nsp: string; toast: number; indrel: number | null }[]
  >`select c.oid, c.relfilenode::text as fn, c.relname, n.nspname as nsp, c.reltoastrelid::int as toast,
           (select i.indrelid::int from pg_index i where i.indexrelid = c.oid) as indrel
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.relfilenode <> 0 and n.nspname not in ('pg_catalog', 'information_schema')
       and n.nspname !~ '^pg_(temp|toast_temp)'`;
  const byOid = new Map(classes.map((c) => [c.oid, c]));
  const toastOwner = new Map(classes.filter((c) => c.toast !== 0).map((c) => [c.toast, c]));
  const owner = (oid: number): (typeof classes)[number] | undefined => {
    const c = byOid.get(oid);
    if (!c) return undefined;
    if (c.indrel !== null) return owner(c.indrel);
    return toastOwner.get(oid) ?? c;
  };
  const map = new Map<string, Relation>();
  for (const c of classes) {
    const o = owner(c.oid);
    if (!o || o.nsp === 'pg_toast' || !schemaMatches(o.nsp)) continue;
    const toast = c.nsp === 'pg_toast' ? (c.indrel === null ? ' (toast)' : ' (toast index)') : '';
    map.set(c.fn, { name: toast ? o.relname + toast : c.relname, table: o.relname, schema: o.nsp });
  }
  return map;
}

/** The WAL records of this database between two LSNs, and every COMMIT/ABORT record (filtered by xid later). */
export async function walRecords(inspect: postgres.Sql, from: string, to: string, dbOid: number) {
  return inspect<WalRecord[]>`
    select xid::text, resource_manager as rm, record_type as type, record_length as len, fpi_length as fpi,
           substring(block_ref from ${'rel \\d+/(\\d+)/\\d+'}) as db, substring(block_ref from ${'rel \\d+/\\d+/(\\d+)'}) as fn
      from pg_get_wal_records_info(${from}::pg_lsn, ${to}::pg_lsn)
     where block_ref ~ ${`rel \\d+/${dbOid}/`} or resource_manager = 'Transaction'`;
}

/** The records of `rels` (database `dbOid`) and the COMMIT/ABORT records of the transactions that wrote them. */
export function ownRecords(
  records: readonly WalRecord[],
  rels: Map<string, Relation>,
  dbOid: number,
): WalRecord[] {
  const ours = records.filter((r) => r.db === String(dbOid) && r.fn !== null && rels.has(r.fn));
  const xids = new Set(ours.map((r) => r.xid).filter((x) => x !== '0'));
  return [...ours, ...records.filter((r) => r.rm === 'Transaction' && xids.has(r.xid))];
}

/** Bytes (MAXALIGNed record lengths), full-page-image bytes and commits of some records. */
export function walTotals(records: readonly WalRecord[]) {
  return {
    bytes: records.reduce((s, r) => s + aligned(r.len), 0),
    fpi: records.reduce((s, r) => s + r.fpi, 0),
    commits: records.filter((r) => r.rm === 'Transaction' && r.type === 'COMMIT').length,
  };
}

/** A connection to the database holding pg_walinspect, made (and the extension created) when missing. */
export async function openInspector(url: string): Promise<postgres.Sql> {
  const name = process.env.WAL_PROFILE_DB ?? 'storage_walinspect';
  const admin = postgres(url, { max: 1, onnotice: () => undefined });
  const [exists] = await admin`select 1 from pg_database where datname = ${name}`;
  if (!exists) await admin.unsafe(`create database "${name}"`);
  await admin.end();
  const target = new URL(url);
  target.pathname = `/${name}`;
  const inspect = postgres(target.toString(), { max: 1, onnotice: () => undefined });
  await inspect`create extension if not exists pg_walinspect`;
  return inspect;
}

export const insertLsn = async (db: postgres.Sql) =>
  (await db<{ l: string }[]>`select pg_current_wal_insert_lsn()::text as l`)[0]!.l;
export const flushLsn = async (db: postgres.Sql) =>
  (await db<{ l: string }[]>`select pg_current_wal_flush_lsn()::text as l`)[0]!.l;

/**
 * A temporary replication slot named `name` that keeps the WAL from now on (a CHECKPOINT, the peer adapters' own
 * among them, would recycle it before it is read); `release()` drops it with its connection.
 */
export async function holdWal(url: string, name: string): Promise<{ release(): Promise<void> }> {
  const keeper = postgres(url, { max: 1, onnotice: () => undefined });
  await keeper`select pg_create_physical_replication_slot(${name}, true, true)`;
  return { release: () => keeper.end() };
}

/** The OID of the database `db` is connected to. */
export async function databaseOid(db: postgres.Sql): Promise<number> {
  const [row] = await db<
    { oid: number }[]
  >`select oid::int from pg_database where datname = current_database()`;
  return row?.oid ?? 0;
}
