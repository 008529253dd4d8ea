import { sql, type SQL } from 'drizzle-orm';
import { PgDialect, pgTable, text } from 'drizzle-orm/pg-core';
import { describe, expect, it } from 'vitest';
import { renderSql } from './render-sql.js';

const dialect = new PgDialect();

/** drizzle's text and parameters (without its `typings`, which the driver call never takes). */
function drizzle(query: SQL): { sql: string; params: unknown[] } {
  const { sql: text, params } = dialect.sqlToQuery(query);
  return { sql: text, params };
}

describe('renderSql', () => {
  it('writes what drizzle writes for text, nested templates, identifiers, lists and values', () => {
    const at = new Date('2026-12-07T00:00:00Z');
    const inner = sql`inner(${'a'}, ${sql.raw('"s"."t"')}, ${7n})`;
    const query = sql`SELECT ${sql.identifier('we"ird')}, ${inner}, ${[1, 'two', null]} FROM t
      WHERE x = ${null} AND y = ${3.5} AND z = ${at} AND j = ${{ k: 1 }}${undefined} AND ${sql.join(
        [sql`a = ${1}`, sql`b = ${2}`],
        sql` OR `,
      )} ${sql.empty()}`;
    expect(renderSql(query)).toEqual(drizzle(query));
    expect(renderSql(query).params).toEqual(['a', 7n, 1, 'two', null, null, 3.5, at, { k: 1 }, 1, 2]);
  });

  it('numbers every value as drizzle does, booleans included, however deep the templates', () => {
    const query = sql`SELECT ${'x'}, ${true}, ${[false, 1]}, ${sql`(${2} AND NOT ${false})`}, ${3}`;
    expect(renderSql(query)).toEqual({
      sql: 'SELECT $1, $2, ($3, $4), ($5 AND NOT $6), $7',
      params: ['x', true, false, 1, 2, false, 3],
    });
    expect(renderSql(query)).toEqual(drizzle(query));
  });

  it('hands a statement with a chunk it does not handle to drizzle, booleans included', () => {
    const table = pgTable('things', { name: text('name') });
    for (const query of [
      sql`SELECT * FROM ${table} WHERE ${table.name} = ${'a'} AND ${true}`,
      sql`SELECT ${sql.param('b')}, ${false}`,
      sql`SELECT ${sql.placeholder('p')}`,
      sql`SELECT ${'inline'}, ${1}`.inlineParams(),
    ]) {
      expect(renderSql(query)).toEqual(drizzle(query));
    }
  });
});
