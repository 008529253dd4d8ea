import { describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { defineActivity, type ActivityContext } from '../activity.js';
import {
  ApplicationFailure,
  AttemptAbortedError,
  InvalidOptionsError,
  LeaseLostError,
  ValidationError,
  type AbortReason,
} from '../errors.js';
import {
  MOCK_ACTIVITY_INFO_DEFAULTS,
  MockActivityContext,
  createMockActivityContext,
  type MockActivityContextOptions,
} from './index.js';

/** Await `promise`, expect it to reject, and return the reason for closer inspection. */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject, but it resolved');
}

function refused(options: unknown): InvalidOptionsError {
  try {
    createMockActivityContext(options as MockActivityContextOptions);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidOptionsError);
    return error as InvalidOptionsError;
  }
  throw new Error('expected createMockActivityContext to throw an InvalidOptionsError');
}

/** An activity that resumes from the previous attempt's heartbeat details and heartbeats each page. */
const importPages = defineActivity({
  name: 'import-pages',
  input: z.object({ pages: z.number().int().positive() }),
  output: z.object({ imported: z.array(z.number()) }),
  leaseMs: '10s',
  queue: 'imports',
  async run(input, ctx) {
    const resumed = z.object({ page: z.number() }).safeParse(ctx.info.heartbeatDetails);
    const imported: number[] = [];
    for (let page = resumed.success ? resumed.data.page + 1 : 1; page <= input.pages; page++) {
      if (ctx.signal.aborted) break;
      imported.push(page);
      await ctx.heartbeat({ page });
    }
    return { imported };
  },
});

describe('createMockActivityContext', () => {
  it('returns a MockActivityContext usable wherever an ActivityContext is expected', () => {
    const ctx = createMockActivityContext();
    const asContext: ActivityContext = ctx;
    expect(ctx).toBeInstanceOf(MockActivityContext);
    expect(asContext.signal.aborted).toBe(false);
  });

  it('fills info with sensible defaults', () => {
    expect(createMockActivityContext().info).toEqual({
      runId: 'mock-run',
      stepId: 'mock-step',
      activityName: 'mock-activity',
      seq: 0,
      attempt: 1,
      epoch: 1,
      fencing: { scope: 'run:mock-run/seq:0', token: 1n },
      heartbeatDetails: undefined,
      queue: 'default',
      workerId: 'mock-worker',
      leaseMs: 30_000,
      startToCloseTimeoutMs: 600_000,
    });
    expect(MOCK_ACTIVITY_INFO_DEFAULTS.leaseMs).toBe(30_000);
  });

  it('takes the info fields a test sets, deriving the fencing scope from the run and position', () => {
    const info = createMockActivityContext({
      info: {
        runId: 'r-7',
        stepId: 's-42',
        seq: 4,
        attempt: 3,
        epoch: 5,
        heartbeatDetails: { page: 2 },
        leaseMs: 5_000,
      },
    }).info;
    expect(info).toMatchObject({
      runId: 'r-7',
      stepId: 's-42',
      attempt: 3,
      epoch: 5,
      heartbeatDetails: { page: 2 },
      leaseMs: 5_000,
      fencing: { scope: 'run:r-7/seq:4', token: 1n },
    });
  });

  it('defaults epoch to attempt, since every charged attempt is also a claim', () => {
    expect(createMockActivityContext({ info: { attempt: 4 } }).info.epoch).toBe(4);
  });

  it('accepts part of fencing and fills the rest', () => {
    expect(createMockActivityContext({ info: { fencing: { token: 57n } } }).info.fencing).toEqual({
      scope: 'run:mock-run/seq:0',
      token: 57n,
    });
    expect(createMockActivityContext({ info: { fencing: { scope: 'ledger:acct-1' } } }).info.fencing).toEqual(
      {
        scope: 'ledger:acct-1',
        token: 1n,
      },
    );
  });

  it('returns a frozen info that later changes to the options object do not affect', () => {
    const options = { info: { runId: 'r-1', fencing: { token: 9n } } };
    const ctx = createMockActivityContext(options);
    options.info.runId = 'changed';
    options.info.fencing.token = 10n;
    expect(ctx.info.runId).toBe('r-1');
    expect(ctx.info.fencing.token).toBe(9n);
    expect(Object.isFrozen(ctx.info)).toBe(true);
    expect(Object.isFrozen(ctx.info.fencing)).toBe(true);
  });

  it('refuses attempt 0, naming the path info.attempt', () => {
    expect(refused({ info: { attempt: 0 } }).issues).toEqual([
      { path: 'info.attempt', message: 'must be ≥ 1' },
    ]);
  });

  it('refuses an epoch below attempt', () => {
    const error = refused({ info: { attempt: 3, epoch: 2 } });
    expect(error.issues).toEqual([
      { path: 'info.epoch', message: 'must be ≥ attempt (3): every attempt is also a claim' },
    ]);
  });

  it('refuses a fencing token that is not a positive bigint', () => {
    expect(refused({ info: { fencing: { token: 5 } } }).issues.map((i) => i.path)).toEqual([
      'info.fencing.token',
    ]);
    expect(refused({ info: { fencing: { token: 0n } } }).issues).toEqual([
      { path: 'info.fencing.token', message: 'must be > 0n' },
    ]);
  });

  it('refuses an unknown info key and an unknown option', () => {
    expect(refused({ info: { atempt: 2 } }).message).toMatch(
      /^\[INVALID_OPTIONS\] invalid mock activity context: info: .*"atempt"/,
    );
    expect(refused({ onHeartBeat: () => undefined }).message).toContain('"onHeartBeat"');
  });

  it('refuses an onHeartbeat that is not a function', () => {
    expect(refused({ onHeartbeat: 'log' }).issues).toEqual([
      { path: 'onHeartbeat', message: 'must be a function' },
    ]);
  });
});

describe('MockActivityContext heartbeats', () => {
  it('records the details of each heartbeat in order', async () => {
    const ctx = createMockActivityContext();
    await ctx.heartbeat({ page: 1 });
    await ctx.heartbeat();
    await ctx.heartbeat({ page: 2 });
    expect(ctx.heartbeats).toEqual([{ page: 1 }, undefined, { page: 2 }]);
  });

  it('calls onHeartbeat with the details of each heartbeat', async () => {
    const onHeartbeat = vi.fn();
    const ctx = createMockActivityContext({ onHeartbeat });
    await ctx.heartbeat('a');
    await ctx.heartbeat('b');
    expect(onHeartbeat.mock.calls).toEqual([['a'], ['b']]);
  });

  it('awaits an async onHeartbeat before the heartbeat resolves', async () => {
    const order: string[] = [];
    const ctx = createMockActivityContext({
      onHeartbeat: async () => {
        await Promise.resolve();
        order.push('callback done');
      },
    });
    await ctx.heartbeat(1);
    order.push('heartbeat resolved');
    expect(order).toEqual(['callback done', 'heartbeat resolved']);
  });

  it('rejects with the error onHeartbeat throws, and does not record that heartbeat', async () => {
    const boom = new Error('database unreachable');
    const ctx = createMockActivityContext({
      onHeartbeat: () => {
        throw boom;
      },
    });
    await expect(ctx.heartbeat({ page: 1 })).rejects.toBe(boom);
    expect(ctx.heartbeats).toEqual([]);
  });

  it('fails the heartbeat during which onHeartbeat aborts with lease-lost, as a fenced-out heartbeat would', async () => {
    const ctx: MockActivityContext = createMockActivityContext({
      info: { fencing: { token: 41n } },
      onHeartbeat: (details) => {
        if ((details as { page: number }).page === 2) ctx.abort('lease-lost');
      },
    });
    await ctx.heartbeat({ page: 1 });
    const error = await rejection(ctx.heartbeat({ page: 2 }));
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(ctx.heartbeats).toEqual([{ page: 1 }]);
    expect(ctx.signal.aborted).toBe(true);
  });

  it('still works when heartbeat is destructured from the context', async () => {
    const ctx = createMockActivityContext();
    const { heartbeat } = ctx;
    await heartbeat('detached');
    expect(ctx.heartbeats).toEqual(['detached']);
  });
});

describe('MockActivityContext abort and cancel', () => {
  it('fires the signal on cancel with an AttemptAbortedError of reason cancelled carrying the message', () => {
    const ctx = createMockActivityContext({ info: { runId: 'r-1', stepId: 's-1', attempt: 2 } });
    const listener = vi.fn();
    ctx.signal.addEventListener('abort', listener);
    ctx.cancel('user pressed stop');
    expect(listener).toHaveBeenCalledTimes(1);
    expect(ctx.signal.aborted).toBe(true);
    const reason: unknown = ctx.signal.reason;
    expect(reason).toBeInstanceOf(AttemptAbortedError);
    expect(reason).toMatchObject({
      code: 'ATTEMPT_ABORTED',
      reason: 'cancelled',
      message: '[ATTEMPT_ABORTED] cancelled: user pressed stop',
      runId: 'r-1',
      stepId: 's-1',
      attempt: 2,
      token: 1n,
    });
  });

  it('uses a default message when cancel is called without one', () => {
    const ctx = createMockActivityContext();
    ctx.cancel();
    expect((ctx.signal.reason as AttemptAbortedError).message).toBe(
      '[ATTEMPT_ABORTED] cancelled: cancelled by the test',
    );
  });

  it.each<AbortReason>(['lease-lost', 'lease-expired-locally', 'deadline', 'cancelled', 'shutdown'])(
    'fires the signal with reason %s',
    (reason) => {
      const ctx = createMockActivityContext();
      ctx.abort(reason);
      expect(ctx.signal.reason).toBeInstanceOf(AttemptAbortedError);
      expect((ctx.signal.reason as AttemptAbortedError).reason).toBe(reason);
      expect((ctx.signal.reason as AttemptAbortedError).message).toMatch(
        new RegExp(`^\\[ATTEMPT_ABORTED\\] ${reason}: `),
      );
    },
  );

  it('gives a lease-lost abort a LeaseLostError cause naming the step and both tokens', () => {
    const ctx = createMockActivityContext({
      info: { activityName: 'charge', seq: 3, attempt: 1, fencing: { token: 41n } },
    });
    ctx.abort('lease-lost');
    const cause = (ctx.signal.reason as AttemptAbortedError).cause;
    expect(cause).toBeInstanceOf(LeaseLostError);
    expect((cause as LeaseLostError).message).toMatch(
      /^\[LEASE_LOST\] heartbeat rejected: step charge#3 attempt 1 \(token 41\) was superseded by token 42\./,
    );
  });

  it('gives other aborts no cause', () => {
    const ctx = createMockActivityContext();
    ctx.abort('deadline', 'took too long');
    expect((ctx.signal.reason as AttemptAbortedError).cause).toBeUndefined();
    expect((ctx.signal.reason as AttemptAbortedError).message).toBe(
      '[ATTEMPT_ABORTED] deadline: took too long',
    );
  });

  it('keeps the first abort reason and ignores later aborts', () => {
    const ctx = createMockActivityContext();
    const listener = vi.fn();
    ctx.signal.addEventListener('abort', listener);
    ctx.abort('shutdown');
    ctx.cancel('too late');
    expect(listener).toHaveBeenCalledTimes(1);
    expect((ctx.signal.reason as AttemptAbortedError).reason).toBe('shutdown');
  });

  it('makes heartbeat reject with a LeaseLostError after a lease-lost abort, and records nothing', async () => {
    const ctx = createMockActivityContext({ info: { activityName: 'charge', fencing: { token: 7n } } });
    ctx.abort('lease-lost');
    const error = await rejection(ctx.heartbeat({ page: 9 }));
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({
      operation: 'heartbeat',
      staleToken: 7n,
      currentToken: 8n,
      code: 'LEASE_LOST',
    });
    expect(ctx.heartbeats).toEqual([]);
  });

  it('makes heartbeat reject with the signal reason after a cancel, and records nothing', async () => {
    const onHeartbeat = vi.fn();
    const ctx = createMockActivityContext({ onHeartbeat });
    ctx.cancel('stop');
    await expect(ctx.heartbeat({ page: 1 })).rejects.toBe(ctx.signal.reason);
    expect(ctx.heartbeats).toEqual([]);
    expect(onHeartbeat).not.toHaveBeenCalled();
  });
});

describe('MockActivityContext fencedTransaction', () => {
  it('calls fn with the transaction given in the options and returns its result', async () => {
    const tx = { writes: [] as string[] };
    const ctx = createMockActivityContext({ transaction: tx });
    const result = await ctx.fencedTransaction((t) => {
      (t as typeof tx).writes.push('insert ledger row');
      return Promise.resolve(42);
    });
    expect(result).toBe(42);
    expect(tx.writes).toEqual(['insert ledger row']);
  });

  it('rejects with a clear InvalidOptionsError when no transaction was given, without calling fn', async () => {
    const fn = vi.fn(() => Promise.resolve());
    const ctx = createMockActivityContext();
    const error = await rejection(ctx.fencedTransaction(fn));
    expect(error).toBeInstanceOf(InvalidOptionsError);
    expect((error as InvalidOptionsError).issues[0]?.path).toBe('transaction');
    expect((error as InvalidOptionsError).message).toContain('createMockActivityContext({ transaction })');
    expect(fn).not.toHaveBeenCalled();
  });

  it('passes on the error fn throws', async () => {
    const ctx = createMockActivityContext({ transaction: {} });
    const boom = new Error('unique violation');
    await expect(ctx.fencedTransaction(() => Promise.reject(boom))).rejects.toBe(boom);
  });

  it('rejects with a LeaseLostError for the fenced transaction after a lease-lost abort, without calling fn', async () => {
    const fn = vi.fn(() => Promise.resolve('written'));
    const ctx = createMockActivityContext({ transaction: {} });
    ctx.abort('lease-lost');
    const error = await rejection(ctx.fencedTransaction(fn));
    expect(error).toMatchObject({ code: 'LEASE_LOST', operation: 'fenced-transaction' });
    expect(fn).not.toHaveBeenCalled();
  });

  it('rejects when the lease is lost while fn runs, because the fence is checked last', async () => {
    const ctx = createMockActivityContext({ transaction: {} });
    const error = await rejection(
      ctx.fencedTransaction(() => {
        ctx.abort('lease-lost');
        return Promise.resolve('written');
      }),
    );
    expect(error).toBeInstanceOf(LeaseLostError);
  });

  it('rejects with the signal reason after a cancel', async () => {
    const ctx = createMockActivityContext({ transaction: {} });
    ctx.cancel();
    await expect(ctx.fencedTransaction(() => Promise.resolve(1))).rejects.toBe(ctx.signal.reason);
  });
});

describe('MockActivityContext.run', () => {
  it('runs the activity with this context and returns its validated output', async () => {
    const ctx = createMockActivityContext();
    await expect(ctx.run(importPages, { pages: 3 })).resolves.toEqual({ imported: [1, 2, 3] });
    expect(ctx.heartbeats).toEqual([{ page: 1 }, { page: 2 }, { page: 3 }]);
  });

  it("lets the activity resume from the previous attempt's heartbeat details", async () => {
    const ctx = createMockActivityContext({ info: { attempt: 2, heartbeatDetails: { page: 2 } } });
    await expect(ctx.run(importPages, { pages: 4 })).resolves.toEqual({ imported: [3, 4] });
  });

  it('lets a test stop the activity through its signal', async () => {
    const ctx: MockActivityContext = createMockActivityContext({
      onHeartbeat: (details) => {
        if ((details as { page: number }).page === 2) ctx.cancel('operator cancelled the run');
      },
    });
    await expect(ctx.run(importPages, { pages: 5 })).rejects.toBeInstanceOf(AttemptAbortedError);
    expect(ctx.heartbeats).toEqual([{ page: 1 }]);
  });

  it("fills unset info fields from the definition's name, lease, timeout and queue", async () => {
    const ctx = createMockActivityContext();
    await ctx.run(importPages, { pages: 1 });
    expect(ctx.info).toMatchObject({
      activityName: 'import-pages',
      leaseMs: 10_000,
      startToCloseTimeoutMs: 600_000,
      queue: 'imports',
    });
  });

  it('keeps info fields the test set over those of the definition', async () => {
    const ctx = createMockActivityContext({ info: { activityName: 'renamed', leaseMs: 4_000 } });
    await ctx.run(importPages, { pages: 1 });
    expect(ctx.info).toMatchObject({ activityName: 'renamed', leaseMs: 4_000, queue: 'imports' });
  });

  it('refuses invalid input with a ValidationError naming the activity and field, without running it', async () => {
    const run = vi.fn(() => Promise.resolve({ ok: true }));
    const probe = defineActivity({
      name: 'probe',
      input: z.object({ id: z.string() }),
      output: z.object({ ok: z.boolean() }),
      run,
    });
    const ctx = createMockActivityContext({ info: { runId: 'r-9' } });
    const error = await rejection(ctx.run(probe, { id: 5 } as unknown as { id: string }));
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).message).toMatch(
      /^\[VALIDATION_FAILED\] input of activity probe is invalid: id: /,
    );
    expect((error as ValidationError).runId).toBe('r-9');
    expect(run).not.toHaveBeenCalled();
  });

  it('passes the parsed input, with schema transforms and defaults applied, to the activity', async () => {
    const seen: unknown[] = [];
    const echo = defineActivity({
      name: 'echo',
      input: z.object({ name: z.string().trim(), times: z.number().default(2) }),
      output: z.string(),
      run: (input) => {
        seen.push(input);
        return Promise.resolve(input.name.repeat(input.times));
      },
    });
    await expect(createMockActivityContext().run(echo, { name: ' ab ' })).resolves.toBe('abab');
    expect(seen).toEqual([{ name: 'ab', times: 2 }]);
  });

  it('refuses invalid output with a ValidationError naming the activity and field', async () => {
    const broken = defineActivity({
      name: 'broken',
      input: z.object({}),
      output: z.object({ chargeId: z.string() }),
      run: () => Promise.resolve({ chargeId: 123 } as unknown as { chargeId: string }),
    });
    const error = await rejection(createMockActivityContext().run(broken, {}));
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).message).toMatch(
      /^\[VALIDATION_FAILED\] output of activity broken is invalid: chargeId: /,
    );
  });

  it('returns the output as parsed by the output schema', async () => {
    const rounds = defineActivity({
      name: 'rounds',
      input: z.object({}),
      output: z.object({ cents: z.number().transform((n) => Math.round(n)) }),
      run: () => Promise.resolve({ cents: 10.6 }),
    });
    await expect(createMockActivityContext().run(rounds, {})).resolves.toEqual({ cents: 11 });
  });

  it('passes on what the activity throws, unchanged', async () => {
    const declined = ApplicationFailure.nonRetryable('card declined', 'CardDeclined');
    const charge = defineActivity({
      name: 'charge',
      input: z.object({}),
      output: z.object({}),
      run: () => Promise.reject(declined),
    });
    await expect(createMockActivityContext().run(charge, {})).rejects.toBe(declined);
  });

  it('hands the activity this very context', async () => {
    let seen: ActivityContext | undefined;
    const spy = defineActivity({
      name: 'spy',
      input: z.object({}),
      output: z.object({}),
      run: (_input, ctx) => {
        seen = ctx;
        return Promise.resolve({});
      },
    });
    const ctx = createMockActivityContext();
    await ctx.run(spy, {});
    expect(seen).toBe(ctx);
  });
});

describe('mock heartbeat details', () => {
  it('refuses details the engine could not store, as the engine does, and records nothing', async () => {
    const ctx = createMockActivityContext();
    await expect(ctx.heartbeat({ n: 1n })).rejects.toMatchObject({ code: 'VALIDATION_FAILED' });
    await expect(ctx.heartbeat({ s: 'a\u0000' })).rejects.toThrow(/s: contains a NUL/);
    expect(ctx.heartbeats).toEqual([]);
  });
});
