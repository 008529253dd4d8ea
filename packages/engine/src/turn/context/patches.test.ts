/** `ctx.patched` and `ctx.deprecatePatch` (patches.ts) over histories recorded before and after a patch. */
import { describe, expect, it } from 'vitest';
import { act, failure, step, turn, workflow } from '../fixtures/turns.js';

const createUser = act('createUser');
const sendWelcome = act('sendWelcome');
const sendHello = act('sendHello');

describe('runTurn: patches', () => {
  const v2 = workflow('patched', async (ctx) => {
    const a = await ctx.run(createUser, { n: 1 });
    if (ctx.patched('hello')) await ctx.run(sendHello, { n: 1 });
    return [a, await ctx.run(sendWelcome, { n: 1 })];
  });

  it('takes the new branch past the history, recording the patch, and replays it', async () => {
    const first = await turn(v2, [step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 })]);
    expect(first.newSteps.map((s) => [s.seq, s.kind, s.name])).toEqual([
      [1, 'value', 'patch:hello'],
      [2, 'activity', 'sendHello'],
    ]);
    const replay = await turn(v2, [
      step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 }),
      step(1, 'value', 'patch:hello', { output: true }),
      step(2, 'activity', 'sendHello', { delivered_seq: 2 }),
    ]);
    expect(replay.newSteps.map((s) => [s.seq, s.name])).toEqual([[3, 'sendWelcome']]);
  });

  it('replays the old branch over a history recorded before the patch, taking no position', async () => {
    const old = await turn(v2, [
      step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 }),
      step(1, 'activity', 'sendWelcome', { output: 'w', delivered_seq: 2 }),
    ]);
    expect(old.outcome).toEqual({ kind: 'completed', output: ['u', 'w'] });
    expect(old.newSteps).toEqual([]);
  });

  it('retires a patch: a recorded one is taken, none is recorded anew', async () => {
    const retired = workflow('retired', async (ctx) => {
      const a = await ctx.run(createUser, { n: 1 });
      ctx.deprecatePatch('hello');
      await ctx.run(sendHello, { n: 1 });
      return [a, await ctx.run(sendWelcome, { n: 1 })];
    });
    const recorded = await turn(retired, [
      step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 }),
      step(1, 'value', 'patch:hello', { output: true }),
      step(2, 'activity', 'sendHello', { delivered_seq: 2 }),
    ]);
    expect(recorded.newSteps.map((s) => [s.seq, s.name])).toEqual([[3, 'sendWelcome']]);
    const fresh = await turn(retired, [step(0, 'activity', 'createUser', { output: 'u', delivered_seq: 1 })]);
    expect(fresh.newSteps.map((s) => [s.seq, s.name])).toEqual([[1, 'sendHello']]);
  });

  it('refuses a change id that is not a name, at the call', async () => {
    const bad = workflow('bad-patch', (ctx) => Promise.resolve(ctx.patched('no spaces')));
    expect(failure(await turn(bad, [])).message).toMatch(/ctx\.patched in workflow bad-patch.*changeId/s);
  });
});
