/**
 * The README's sample of what `pnpm demo` prints is one run's, on the database its introduction names: a newcomer
 * compares it with their own run. (Its lines are taken from a real run; this checks what a mix of runs gets wrong.)
 */
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const intro = readme.indexOf('What `pnpm demo` prints');
const start = readme.indexOf('```text\n', intro) + '```text\n'.length;
const sample = readme.slice(start, readme.indexOf('```\n', start));

it('is of one run on PostgreSQL, as its introduction says, with every example passing all its checks', () => {
  expect(intro).toBeGreaterThan(0);
  expect(readme.slice(intro, start)).toContain('here on PostgreSQL with `PALISADE_DEMO_KEEP=1`');
  // The examples print `checks (<database>):` for the database they ran on.
  const databases = [...sample.matchAll(/^checks \((\w+)\):$/gm)].map((m) => m[1]);
  expect(databases.length).toBeGreaterThan(0);
  expect(new Set(databases)).toEqual(new Set(['postgres']));
  // One run: one schema throughout, and the summary of every example of `pnpm demo`, in its order. On PostgreSQL
  // each has 9 checks (the invoice example's ninth is the database's fence: test/examples/invoice-settlement).
  expect(new Set(sample.match(/palisade_demo_[0-9a-f]{8}/g))).toHaveProperty('size', 1);
  expect(sample.match(/^(?:ok|FAILED) .*$/gm)?.map((l) => l.replace(/ in [\d.]+ s$/, ''))).toEqual([
    'ok     invoice settlement: 9/9 checks passed',
    'ok     video transcoding: 9/9 checks passed',
    'ok     support agent: 9/9 checks passed',
  ]);
  // Each kept run the summary lists: its comment, then its command.
  const listed = sample.slice(sample.indexOf("=== the zombies' runs")).split('\n').slice(1, -1);
  const commands = listed.filter((l) => l.startsWith('npx -y pnpm@12.4.2 palisade runs show '));
  expect(commands.length).toBeGreaterThan(0);
  for (const command of commands) expect(listed[listed.indexOf(command) - 1]).toMatch(/^# /);
});
