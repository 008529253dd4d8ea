/**
 * The duration options renamed to carry their unit (README, "What changed"): an old name is refused with
 * INVALID_OPTIONS whose message names the new one and the call it belongs to, in one form everywhere — and only
 * where that call takes the new name (never a hint at an option the call does not have, nor in a payload checked
 * against the user's own schema).
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createEngine, type Engine } from '@palisade/engine';
import { defineActivity, defineWorkflow } from '@palisade/sdk';
import { useEngineTarget } from '../support/engine.js';
import { settle } from '../worker/helpers.js';
import { emptyActivity } from '../fixtures/empty-activity.js';

const echo = emptyActivity('echo');
const done = () => Promise.resolve({});
const strictInput = z.object({ v: z.number() }).strict();
const strict = defineActivity({ name: 'strict', input: strictInput, output: z.object({}), run: done });
const flow = defineWorkflow({ name: 'flow', input: z.object({}), output: z.object({}), run: done });
const NO_RUN = '00000000-0000-4000-8000-000000000000';
const period = { limit: 10, period: '1s' };
const schedule = { id: 'nightly', workflow: flow, input: {} };

/** Each call's message, or that it was accepted. */
async function messages(calls: readonly (readonly [string, () => unknown])[]): Promise<[string, string][]> {
  const out: [string, string][] = [];
  for (const [name, call] of calls) {
    const outcome = await settle(Promise.resolve().then(call));
    out.push([name, outcome.ok ? 'accepted' : String((outcome.error as Error).message)]);
  }
  return out;
}

const renamed = (where: string, old: string, now: string, path = '') =>
  `[INVALID_OPTIONS] invalid ${where}: ${path ? `${path}: ` : ''}Unrecognized key: "${old}" (renamed: "${old}" is now "${now}")`;

describe('old option names', () => {
  const target = useEngineTarget('postgres');

  it('are answered with the new name and the call, where that call takes the new name, and only there', async () => {
    const engine: Engine = await target.engine();
    expect(
      await messages([
        ['enqueue delay', () => engine.client.enqueue(echo, {}, { delay: 5 } as never)],
        ['enqueueMany delay', () => engine.client.enqueueMany(echo, [{}], { delay: 5 } as never)],
        ['start delay', () => engine.client.start(flow, {}, { delay: 5 } as never)],
        ['startMany delay', () => engine.client.startMany(flow, [{}], { delay: 5 } as never)],
        ['result timeout', () => engine.client.getHandle(NO_RUN).result({ timeout: 5 } as never)],
        // A required new name left out: the hint alone, not also a complaint that the new name is missing.
        ['enqueue rateLimit.period', () => engine.client.enqueue(echo, {}, { rateLimit: period } as never)],
        ['defineActivity rateLimit.period', () => emptyActivity('limited', { rateLimit: period } as never)],
        ['pruneRuns olderThan', () => engine.pruneRuns({ olderThan: '30d' } as never)],
        ['createEngine retention', () => createEngine({ retention: '30d' } as never)],
        ['schedules.create every', () => engine.schedules.create({ ...schedule, every: '5m' } as never)],
        // Old names, but of options these calls never had: no hint at a name they do not take either.
        ['enqueue timeout', () => engine.client.enqueue(echo, {}, { timeout: 5 } as never)],
        ['worker delay', () => engine.worker({ activities: [echo], delay: 5 } as never)],
        ['createEngine every', () => createEngine({ every: '5m' } as never)],
        [
          'concurrency period',
          () =>
            engine.client.enqueue(echo, {}, {
              concurrency: { key: 'k', limit: 1, period: 5 },
            } as never),
        ],
        // The user's own schema: a field of that name is theirs, not a renamed option.
        ['payload timeout', () => engine.client.enqueue(strict, { v: 1, timeout: 5 } as never)],
      ]),
    ).toEqual([
      ['enqueue delay', renamed('enqueue options of echo', 'delay', 'delayMs')],
      ['enqueueMany delay', renamed('enqueueMany options of echo', 'delay', 'delayMs')],
      ['start delay', renamed('start options of flow', 'delay', 'delayMs')],
      ['startMany delay', renamed('startMany options of flow', 'delay', 'delayMs')],
      ['result timeout', renamed('result options', 'timeout', 'timeoutMs')],
      ['enqueue rateLimit.period', renamed('enqueue options of echo', 'period', 'periodMs', 'rateLimit')],
      ['defineActivity rateLimit.period', renamed('activity limited', 'period', 'periodMs', 'rateLimit')],
      ['pruneRuns olderThan', renamed('prune options', 'olderThan', 'olderThanMs')],
      ['createEngine retention', renamed('engine options', 'retention', 'retentionMs')],
      ['schedules.create every', renamed('schedule options of nightly', 'every', 'everyMs')],
      ['enqueue timeout', '[INVALID_OPTIONS] invalid enqueue options of echo: Unrecognized key: "timeout"'],
      ['worker delay', '[INVALID_OPTIONS] invalid worker options: Unrecognized key: "delay"'],
      ['createEngine every', '[INVALID_OPTIONS] invalid engine options: Unrecognized key: "every"'],
      [
        'concurrency period',
        '[INVALID_OPTIONS] invalid enqueue options of echo: concurrency: Unrecognized key: "period"',
      ],
      [
        'payload timeout',
        '[VALIDATION_FAILED] input of activity strict is invalid: (root): Unrecognized key: "timeout"',
      ],
    ]);
  });
});
