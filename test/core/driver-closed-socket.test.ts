/**
 * postgres.js 3.4.9 throws an uncaught TypeError from `nextWrite` when a query is written to a connection whose
 * backend the server has ended (porsager/postgres#1154, #1208): the process dies, and no try/catch can stop it.
 * Workers meet exactly that under `pg_terminate_backend`, a database restart or an idle-in-transaction timeout,
 * so the dependency is patched (patches/postgres@3.4.9.patch) to reject with CONNECTION_CLOSED instead. The
 * check runs in a child process, where an uncaught exception shows as the exit code.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { useTestDatabase } from '../support/postgres.js';

const TEST_ROOT = fileURLToPath(new URL('..', import.meta.url));

const SCRIPT = `
import postgres from 'postgres';
const url = process.argv[1];
const admin = postgres(url, { max: 1, onnotice: () => {} });
const sql = postgres(url, { max: 1, onnotice: () => {} });
const seen = [];
const reserved = await sql.reserve();
const [{ pid }] = await reserved\`SELECT pg_backend_pid() AS pid\`;
await admin\`SELECT pg_terminate_backend(\${pid})\`;
await new Promise((resolve) => setTimeout(resolve, 200));
for (let i = 0; i < 3; i++) {
  try { await reserved\`SELECT 1\`; seen.push('ok'); } catch (error) { seen.push(error.code); }
}
reserved.release();
const [{ one }] = await sql\`SELECT 1 AS one\`;
seen.push('pool:' + one);
console.log(JSON.stringify(seen));
await Promise.all([admin.end(), sql.end()]);
`;

describe('postgres.js on a connection the server ended', () => {
  const url = useTestDatabase();

  it('rejects later queries on a reserved connection with CONNECTION_CLOSED instead of crashing the process', async () => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', SCRIPT, url()], {
      cwd: TEST_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const [code] = (await once(child, 'exit')) as [number | null];
    expect(stderr).not.toContain('TypeError');
    expect(code, stderr).toBe(0);
    const seen = JSON.parse(stdout.trim()) as string[];
    expect(seen.slice(0, 3)).toEqual(['CONNECTION_CLOSED', 'CONNECTION_CLOSED', 'CONNECTION_CLOSED']);
    expect(seen[3]).toBe('pool:1');
  });
});
