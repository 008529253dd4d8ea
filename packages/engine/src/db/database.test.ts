import { describe, expect, it } from 'vitest';
import { isPalisadeError } from '@palisade/sdk';
import { classifyDatabaseError, sqlstateOf } from '../infra-retry.js';
import { wrapDatabaseError } from './database.js';

/** drizzle's shape: "Failed query: <sql>\nparams: <every parameter>", the driver's error as `cause`. */
function drizzleError(query: string, params: unknown[], cause: Error): Error {
  return Object.assign(new Error(`Failed query: ${query}\nparams: ${params.join(',')}`), {
    query,
    params,
    cause,
  });
}

function serverError(code: string, message: string, extra: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { code, ...extra });
}

describe('wrapDatabaseError', () => {
  it('keeps the SQLSTATE and the statement cut short, never the parameters', () => {
    const payload = `secret-${'p'.repeat(200_000)}`;
    const query = `INSERT INTO runs (input) VALUES ($1::jsonb) ${'/* padding */ '.repeat(100)}`;
    const wrapped = wrapDatabaseError(
      drizzleError(
        query,
        [payload],
        serverError('22P05', 'unsupported Unicode escape sequence', { params: [payload] }),
      ),
    ) as Error;
    expect(isPalisadeError(wrapped, 'DATABASE_ERROR')).toBe(true);
    expect(wrapped.message).toMatch(
      /^\[DATABASE_ERROR\] 22P05 unsupported Unicode escape sequence in statement: INSERT INTO runs \(input\) VALUES \(\$1::jsonb\)/,
    );
    expect(wrapped.message).not.toContain('secret');
    expect(wrapped.message.length).toBeLessThan(700);
    // The driver's error stays the cause (classification reads its SQLSTATE), its parameters hidden from loggers.
    expect(sqlstateOf(wrapped)).toBe('22P05');
    expect(Object.keys(wrapped.cause as object)).not.toContain('params');
    expect(JSON.stringify(wrapped.cause)).not.toContain('secret');
  });

  it('leaves out a long value the server quotes in its own message', () => {
    const wrapped = wrapDatabaseError(
      serverError('22P02', `invalid input syntax for type integer: "${'v'.repeat(500)}"`),
    ) as Error;
    expect(wrapped.message).toBe(
      '[DATABASE_ERROR] 22P02 invalid input syntax for type integer: "(a value of 500 characters)"',
    );
  });

  it('reports a refused connection as DATABASE_UNAVAILABLE, still classified transient', () => {
    const wrapped = wrapDatabaseError(
      serverError('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'),
    ) as Error;
    expect(isPalisadeError(wrapped, 'DATABASE_UNAVAILABLE')).toBe(true);
    expect(wrapped.message).toContain('cannot reach the database');
    expect(classifyDatabaseError(wrapped)).toBe('transient');
  });

  it('returns a PalisadeError, and anything that is not an Error, as it is', () => {
    const already = wrapDatabaseError(serverError('x', 'y'));
    expect(wrapDatabaseError(already)).toBe(already);
    expect(wrapDatabaseError('text')).toBe('text');
  });
});
