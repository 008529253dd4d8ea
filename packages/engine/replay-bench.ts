/**
 * How long a full replay of a long history takes in the turn runtime, with the event loop idle and with the
 * worker's other I/O going on (20 TCP connections ping-ponging on localhost in this process): the turn delivers
 * each recorded outcome and drains the microtask queue, so the replay should take no event-loop turns and cost
 * the same either way (issue 12, item 6). No database: the history is made up, as a claim would return it.
 *
 *   cd packages/engine && npx tsx --conditions=@palisade/source replay-bench.ts [outcomes=1000] [samples=30]
 *
 * Prints the p50 and minimum over the samples, in ms, for each condition. Not part of the tests.
 */
import { connect, createServer, type Socket } from 'node:net';
import { z } from 'zod';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import type { HistoryStepRow } from './src/turn/contract.js';
import { runTurn } from './src/turn/run-turn.js';
import { nodeTurnHost } from './src/worker/non-durable-await.js';

const outcomes = Number(process.argv[2] ?? 1_000);
const samples = Number(process.argv[3] ?? 30);
const NOW_MS = Date.parse('2030-01-01T00:00:00Z');

const act = defineActivity({
  name: 'act',
  input: z.object({ i: z.number() }),
  output: z.number(),
  run: () => Promise.resolve(0),
});
const sequential = defineWorkflow({
  name: 'sequential',
  input: z.unknown(),
  output: z.number(),
  async run(_input, ctx) {
    let sum = 0;
    for (let i = 0; i < outcomes; i++) sum += await ctx.run(act, { i });
    return sum;
  },
});
const history: HistoryStepRow[] = Array.from({ length: outcomes }, (_, seq) => ({
  id: `00000000-0000-4000-8000-${String(seq).padStart(12, '0')}`,
  seq,
  kind: 'activity',
  name: 'act',
  status: 'completed',
  output: seq,
  error: null,
  delivered_seq: seq + 1,
  due_ms: null,
  finished_ms: NOW_MS - 10_000 + seq,
}));

async function measure(): Promise<{ p50: number; min: number }> {
  const times: number[] = [];
  for (let k = 0; k < samples; k++) {
    const started = performance.now();
    const result = await runTurn({
      host: nodeTurnHost,
      workflow: sequential,
      info: {
        runId: '11111111-1111-4111-8111-111111111111',
        workflowName: 'sequential',
        turnAttempt: 1,
        queue: 'q',
      },
      input: null,
      priority: 0,
      history,
      nowMs: NOW_MS,
      cancelRequested: false,
    });
    if (result.outcome.kind !== 'completed') throw new Error(`replay ended ${result.outcome.kind}`);
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(times.length / 2)] as number, min: times[0] as number };
}

const show = (label: string, m: { p50: number; min: number }) =>
  console.log(
    `${label}: full replay of ${outcomes} outcomes, p50 ${m.p50.toFixed(2)} ms, min ${m.min.toFixed(2)} ms`,
  );

show('idle event loop', await measure());

const server = createServer((c) => c.on('data', (d) => c.write(d)).on('error', () => undefined)).listen(0);
await new Promise((resolve) => server.once('listening', resolve));
const { port } = server.address() as { port: number };
const sockets: Socket[] = Array.from({ length: 20 }, () => {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  socket.on('connect', () => socket.write('x'));
  socket.on('data', (d) => socket.write(d));
  return socket;
});
await new Promise((resolve) => setTimeout(resolve, 100));
show('busy event loop (20 TCP ping-pongs)', await measure());
for (const socket of sockets) socket.destroy();
server.close();
