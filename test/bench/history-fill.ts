/**
 * Fills an engine schema with finished work, fast: `count` copies of one real finished run (its run, steps,
 * attempts and events rows), written with INSERT … SELECT over generate_series, so the filled rows look exactly
 * like the engine's own. Each copy g gets, column by column (read from information_schema, so new columns are
 * copied too):
 * - uuid columns: fresh ids from md5(value || ':' || g), and equal values stay equal across columns and tables
 *   (a step's run_id still names its run, ended_nonce its nonce); a time-ordered id (UUIDv7: the engine's run and
 *   step ids since migration 0022) stays one, its time shifted as the timestamps are, so the copies' keys sit in
 *   the indexes where the engine's own older keys would; any other uuid (nonces, keys of older engines) is the
 *   md5 itself;
 * - text columns: the template's run and step ids replaced by the copy's (fencing_scope `run:<id>`), as above;
 * - fencing_token / turn_token: a block of fresh tokens per copy, above every token taken so far; the token
 *   sequence is moved past them, so tokens keep growing;
 * - timestamptz columns: shifted (count + 1 − g) ms into the past, so copies are older than the template;
 * - serial ids and generated columns: left to the database; everything else: copied as it is.
 */
import type postgres from '@palisade/engine/postgres';

const TABLES = [
  { table: 'runs', runColumn: 'id' },
  { table: 'steps', runColumn: 'run_id' },
  { table: 'attempt_records', runColumn: 'run_id' },
  { table: 'events', runColumn: 'run_id' },
] as const;
const TOKEN_COLUMNS = new Set(['fencing_token', 'turn_token']);
/** Copies per INSERT statement (bounds each statement's time and memory; progress is reported per chunk). */
const CHUNK = 100_000;

interface Column {
  readonly column_name: string;
  readonly data_type: string;
  readonly column_default: string | null;
  readonly is_generated: string;
}

/**
 * The copy g of the uuid `expr` (SQL): a UUIDv7 keeps its version, its milliseconds moved ($3 + 1 − g) into the
 * past and the rest of its bits (variant kept) from md5(expr || ':' || g); any other uuid is that md5.
 */
function uuidCopy(expr: string): string {
  const t = `(${expr})::text`;
  const h = `md5(${t} || ':' || g)`;
  const ms = `('x' || substr(${t}, 1, 8) || substr(${t}, 10, 4))::bit(48)::bigint - ($3::int + 1 - g)`;
  return `(CASE WHEN substr(${t}, 15, 1) = '7'
     THEN (lpad(to_hex(${ms}), 12, '0') || '7' || substr(${h}, 13, 3)
           || translate(substr(${h}, 16, 1), '0123456789abcdef', '89ab89ab89ab89ab') || substr(${h}, 17, 15))::uuid
     ELSE ${h}::uuid END)`;
}

const ident = (name: string) => `"${name.replace(/"/g, '""')}"`;
const literal = (text: string) => `'${text.replace(/'/g, "''")}'`;

/**
 * Write `count` copies of finished run `templateRunId` into `schema`, then VACUUM ANALYZE the tables (a database
 * that has been running for a while is vacuumed and has statistics; without this, autovacuum would run during the
 * measurement).
 * @param progress called after each chunk with the copies written so far
 */
export async function fillHistory(
  admin: postgres.Sql,
  schema: string,
  templateRunId: string,
  count: number,
  progress: (written: number) => void,
): Promise<void> {
  const s = ident(schema);
  const [stepIds, tokens] = await Promise.all([
    admin.unsafe<{ id: string }[]>(`select id::text from ${s}.steps where run_id = $1`, [templateRunId]),
    admin.unsafe<{ lo: string | null; hi: string | null }[]>(
      `select min(t)::text as lo, max(t)::text as hi from (
         select turn_token as t from ${s}.runs where id = $1
         union all select fencing_token from ${s}.steps where run_id = $1
         union all select fencing_token from ${s}.attempts where run_id = $1) x`,
      [templateRunId],
    ),
  ]);
  const lo = BigInt(tokens[0]?.lo ?? '0');
  const span = BigInt(tokens[0]?.hi ?? '0') - lo + 1n;
  const [base] = await admin.unsafe<{ v: string }[]>(`select nextval('${s}."fencing_token_seq"')::text as v`);
  const tokenBase = BigInt(base?.v ?? '0');
  // Reserve every token the copies use before writing them, so a claim running meanwhile cannot take one.
  await admin.unsafe(`select setval('${s}."fencing_token_seq"', $1::bigint)`, [
    String(tokenBase + BigInt(count) * span),
  ]);

  const ids = [templateRunId, ...stepIds.map((r) => r.id)];
  const statements: string[] = [];
  for (const { table, runColumn } of TABLES) {
    const columns = await admin<Column[]>`
      select column_name, data_type, column_default, is_generated from information_schema.columns
       where table_schema = ${schema} and table_name = ${table} order by ordinal_position`;
    const names: string[] = [];
    const values: string[] = [];
    for (const c of columns) {
      // Serial ids take their defaults; generated columns (runs.live_concurrency_key) compute themselves.
      if (c.column_default?.startsWith('nextval(') || c.is_generated === 'ALWAYS') continue;
      const col = `t.${ident(c.column_name)}`;
      let value = col;
      if (c.data_type === 'uuid') value = uuidCopy(col);
      else if (c.data_type === 'timestamp with time zone')
        value = `${col} - ($3::int + 1 - g) * interval '1 millisecond'`;
      else if (TOKEN_COLUMNS.has(c.column_name))
        value = `${col} - ${lo} + ${tokenBase} + (g - 1)::bigint * ${span}`;
      else if (c.data_type === 'text') {
        for (const id of ids)
          value = `replace(${value}, ${literal(id)}, ${uuidCopy(`${literal(id)}::uuid`)}::text)`;
      }
      names.push(ident(c.column_name));
      values.push(value);
    }
    statements.push(
      `insert into ${s}.${ident(table)} (${names.join(', ')})
       select ${values.join(', ')}
         from ${s}.${ident(table)} t cross join generate_series($1::int, $2::int) g
        where t.${ident(runColumn)} = ${literal(templateRunId)}
        order by g`,
    );
  }
  for (let from = 1; from <= count; from += CHUNK) {
    const to = Math.min(count, from + CHUNK - 1);
    for (const statement of statements) await admin.unsafe(statement, [from, to, count]);
    progress(to);
  }
  await admin.unsafe(`vacuum (analyze) ${TABLES.map(({ table }) => `${s}.${ident(table)}`).join(', ')}`);
}
