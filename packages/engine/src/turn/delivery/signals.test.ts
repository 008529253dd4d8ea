/** Pending signals reaching signal waits (signals.ts, fresh.ts, context/signal-wait.ts). */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSignal } from '@palisade/sdk';
import { failure, NOW_MS, step, turn, workflow } from '../fixtures/turns.js';

describe('runTurn: signals', () => {
  const note = defineSignal({ name: 'note', payload: z.string() });
  const other = defineSignal({ name: 'other', payload: z.number() });
  const signal = (id: number, name: string, payload: unknown, receivedMs: number) => ({
    id: String(id),
    name,
    payload,
    received_ms: receivedMs,
  });

  it('hands buffered signals to new waits in arrival order, by name, recording each wait taken', async () => {
    const wf = workflow('two-notes', async (ctx) => {
      const a = await ctx.waitForSignal(note);
      const n = await ctx.waitForSignal(other);
      const b = await ctx.waitForSignal(note);
      return [a, n, b];
    });
    const result = await turn(wf, [], {
      signals: [
        signal(7, 'note', 'first', NOW_MS - 30),
        signal(8, 'other', 42, NOW_MS - 20),
        signal(9, 'note', 'second', NOW_MS - 10),
      ],
    });
    expect(result.outcome).toEqual({ kind: 'completed', output: ['first', 42, 'second'] });
    expect(
      result.newSteps.map((s) => [s.seq, s.kind, s.name, 'signalId' in s ? s.signalId : undefined]),
    ).toEqual([
      [0, 'signal', 'note', '7'],
      [1, 'signal', 'other', '8'],
      [2, 'signal', 'note', '9'],
    ]);
    expect(result.deliveries).toEqual([]);
  });

  it('completes a recorded wait with a new signal by position, and replays it with the payload it took', async () => {
    const wf = workflow('one-note', async (ctx) => `got ${await ctx.waitForSignal(note)}`);
    const waiting = [step(0, 'signal', 'note', { status: 'scheduled', finished_ms: null })];
    const first = await turn(wf, waiting, { signals: [signal(3, 'note', 'hi', NOW_MS - 5)] });
    expect(first.outcome).toEqual({ kind: 'completed', output: 'got hi' });
    expect(first.deliveries).toEqual([
      { stepId: null, seq: 0, deliveredSeq: 1, firesTimer: false, signalId: '3' },
    ]);
    // Replayed from the recorded outcome, whatever is pending now.
    const recorded = [
      step(0, 'signal', 'note', { output: { signalId: '3', payload: 'hi' }, delivered_seq: 1 }),
    ];
    const replay = await turn(wf, recorded, { signals: [signal(4, 'note', 'other', NOW_MS - 1)] });
    expect(replay.outcome).toEqual({ kind: 'completed', output: 'got hi' });
    expect(replay.deliveries).toEqual([]);
  });

  it('times out a wait whose timeout came before the signal, and lets a signal that came first win', async () => {
    const wf = workflow('patient', async (ctx) => {
      const w = await ctx.waitForSignal(note, { timeoutMs: '1m' });
      return w.timedOut ? 'timed out' : w.payload;
    });
    const due = NOW_MS - 100;
    const waiting = [step(0, 'signal', 'note', { status: 'scheduled', due_ms: due, finished_ms: null })];
    const late = await turn(wf, waiting, { signals: [signal(5, 'note', 'late', due + 50)] });
    expect(late.outcome).toEqual({ kind: 'completed', output: 'timed out' });
    expect(late.deliveries).toEqual([{ stepId: waiting[0]?.id, seq: 0, deliveredSeq: 1, firesTimer: true }]);
    const early = await turn(wf, waiting, { signals: [signal(5, 'note', 'early', due - 50)] });
    expect(early.outcome).toEqual({ kind: 'completed', output: 'early' });
    expect(early.deliveries).toEqual([
      { stepId: null, seq: 0, deliveredSeq: 1, firesTimer: false, signalId: '5' },
    ]);
    const stored = [step(0, 'signal', 'note', { output: { timedOut: true }, delivered_seq: 1 })];
    expect((await turn(wf, stored)).outcome).toEqual({ kind: 'completed', output: 'timed out' });
  });

  it('fails a wait for something that is not a signal at the call, naming it', async () => {
    const wf = workflow('bad-wait', (ctx) => ctx.waitForSignal({ name: 'note' } as unknown as typeof note));
    expect(failure(await turn(wf, [])).message).toMatch(
      /waitForSignal\(undefined\).*defineSignal|signal: must be a signal from defineSignal/s,
    );
  });

  it('refuses the old name `timeout` at the call with the rename hint of every renamed option', async () => {
    const wf = workflow('old-timeout', (ctx) =>
      ctx.waitForSignal(note, { timeout: '2d' } as unknown as { timeoutMs: string }),
    );
    const error = failure(await turn(wf, []));
    expect([error.type, error.message]).toEqual([
      'InvalidOptionsError',
      '[INVALID_OPTIONS] invalid ctx.waitForSignal(note) in workflow old-timeout: ' +
        'Unrecognized key: "timeout" (renamed: "timeout" is now "timeoutMs")',
    ]);
    const other = workflow('other-key', (ctx) => ctx.waitForSignal(note, { wait: 1 } as never));
    expect(failure(await turn(other, [])).message).toBe(
      '[INVALID_OPTIONS] invalid ctx.waitForSignal(note) in workflow other-key: Unrecognized key: "wait"',
    );
  });
});
