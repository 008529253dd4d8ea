/**
 * `palisade dev`: a local PostgreSQL that several processes share. Three worker processes and this test (the
 * producer) use the DATABASE_URL it prints; 200 jobs are each done exactly once; Ctrl-C stops the server.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { z } from 'zod';
import { defineActivity } from '@palisade/sdk';
import { createEngine } from '@palisade/engine';
import postgres from '@palisade/engine/postgres';
import { CLI_TEST_TIMEOUT_MS, startCli, type RunningCli } from '../cli/cli-process.js';

const JOBS = fileURLToPath(new URL('../fixtures/dev-jobs.ts', import.meta.url));
const devJob = defineActivity({
  name: 'dev-job',
  input: z.object({ n: z.number().int() }),
  output: z.object({ n: z.number().int() }),
  run: () => Promise.reject(new Error('runs only in the worker processes')),
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

it(
  'serves three worker processes and a producer through palisade dev: 200 jobs, each done once',
  async () => {
    const dir = await mkdtemp(join(tmpdir(), 'palisade-dev-'));
    await chmod(dir, 0o755); // as root the server runs as the OS user postgres, which must reach its data
    const port = await freePort();
    const dev = startCli(['dev', '--port', String(port), '--dir', join(dir, 'dev')], { timeoutMs: 170_000 });
    const workers: RunningCli[] = [];
    try {
      const line = await dev.waitForOutput(/DATABASE_URL=(\S+)/, 120_000);
      const databaseUrl = line.slice('DATABASE_URL='.length);
      expect(databaseUrl).toBe(`postgres://postgres:palisade@127.0.0.1:${port}/palisade`);
      const sql = postgres(databaseUrl, { max: 1, onnotice: () => undefined });
      try {
        await sql`CREATE TABLE dev_jobs_done (job int NOT NULL, worker text NOT NULL)`;
        const engine = await createEngine({ databaseUrl });
        try {
          for (let i = 1; i <= 3; i++) {
            workers.push(
              startCli(['worker', JOBS, '--worker-id', `w${i}`, '--concurrency', '4'], {
                env: { DATABASE_URL: databaseUrl },
              }),
            );
          }
          await Promise.all(workers.map((w) => w.waitForOutput(/worker started/, 120_000)));
          const handles = [];
          for (let n = 0; n < 200; n++)
            handles.push(await engine.client.enqueue(devJob, { n }, { key: `job-${n}` }));
          const results = await Promise.all(handles.map((h) => h.result({ timeoutMs: 120_000 })));
          expect(results.map((r) => r.n)).toEqual(Array.from({ length: 200 }, (_, n) => n));
        } finally {
          await engine.close();
        }
        const done = await sql<
          { job: number; worker: string }[]
        >`SELECT job, worker FROM dev_jobs_done ORDER BY job`;
        expect(done.map((r) => r.job)).toEqual(Array.from({ length: 200 }, (_, n) => n)); // each once, none lost
        const byWorker = new Set(done.map((r) => r.worker));
        expect(byWorker.size).toBeGreaterThan(1); // the processes shared the queue
      } finally {
        await sql.end({ timeout: 1 });
      }
      for (const w of workers) w.child.kill('SIGINT');
      for (const w of workers) expect((await w.exited).code).toBe(0);
      dev.child.kill('SIGINT');
      const ended = await dev.exited;
      expect(ended.code).toBe(0);
      expect(ended.stdout).toContain('PostgreSQL stopped');
    } finally {
      for (const w of workers) w.child.kill('SIGKILL');
      dev.child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  },
  CLI_TEST_TIMEOUT_MS,
);
