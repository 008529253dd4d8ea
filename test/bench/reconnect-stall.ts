/**
 * How long a test client's statements wait for their connection after a database outage: three loops of short
 * queries on a `max: 2` postgres.js client, through rounds of backend kills (3–6) and a server restart (fast or
 * immediate, down 0.6–4 s) of a private embedded server. Prints, per round, the oldest statement still waiting
 * within 6 s of the restart. `ENGINE_BACKOFF=1` uses support/reconnecting-client.ts (the engine's reconnect
 * backoff); without it, postgres.js's default.
 *
 *   cd test && npx tsx --conditions=@palisade/source bench/reconnect-stall.ts 16
 *   cd test && ENGINE_BACKOFF=1 npx tsx --conditions=@palisade/source bench/reconnect-stall.ts 16
 */
import { setTimeout as sleep } from 'node:timers/promises';
import postgres from '@palisade/engine/postgres';
import { startPostgresServer } from '../support/server.js';
import { reconnectingClient } from '../support/reconnecting-client.js';

const server = await startPostgresServer({ embedded: true });
const u = new URL(server.adminUrl);
u.searchParams.set('application_name', 'abuse');
const fixture = process.env.ENGINE_BACKOFF
  ? reconnectingClient(u.toString(), { max: 2 })
  : postgres(u.toString(), { max: 2, onnotice: () => undefined });
const admin = () => postgres(server.adminUrl, { max: 1, onnotice: () => undefined });
let stop = false;
const inflight = new Map<number, number>();
let seq = 0;
const workers = [0, 1, 2].map(async () => {
  while (!stop) {
    const id = seq++;
    inflight.set(id, Date.now());
    await fixture`SELECT pg_sleep(0.02)`.catch(() => sleep(20));
    inflight.delete(id);
  }
});
const rnd = (a: number, b: number) => a + Math.random() * (b - a);
const oldest = () => Math.max(0, ...[...inflight.values()].map((t) => Date.now() - t));
for (let round = 0; round < Number(process.argv[2] ?? 20); round++) {
  const a = admin();
  const kills = Math.floor(rnd(3, 7));
  for (let k = 0; k < kills; k++) {
    await sleep(rnd(50, 400));
    await a`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'abuse'`.catch(
      () => undefined,
    );
  }
  await a.end({ timeout: 0 });
  await sleep(rnd(50, 400));
  const mode = round % 2 === 0 ? 'fast' : 'immediate';
  await server.shutdown!(mode);
  await sleep(rnd(600, 4000));
  await server.start!();
  const up = Date.now();
  let worst = 0;
  while (Date.now() - up < 6000) {
    worst = Math.max(worst, oldest());
    await sleep(100);
  }
  console.log(
    `round ${round} ${mode}: oldest in-flight query during 6 s after start: ${worst} ms; now ${oldest()} ms`,
  );
}
stop = true;
await Promise.race([Promise.all(workers), sleep(40000)]);
console.log('final oldest', oldest());
await fixture.end({ timeout: 0 });
await server.stop();
process.exit(0);
