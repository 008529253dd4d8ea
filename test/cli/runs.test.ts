/**
 * `palisade migrate` and `palisade runs …`, run as real processes against a fresh database. The runs are made
 * through the engine API in the test: an activity that fails once, then has its second attempt superseded (the
 * database clock is moved past its lease and another worker claims and completes it), so the zombie's
 * completion is rejected as stale; and a run nobody serves, to cancel and retry.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import postgres from '@palisade/engine/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApplicationFailure, defineActivity, defineSignal, defineWorkflow } from '@palisade/sdk';
import {
  createEngine,
  loadMigrations,
  type Engine,
  type RunDetails,
  type Worker,
  type WorkerEventMap,
} from '@palisade/engine';
import { advanceClock } from '@palisade/engine/testing';
import { afterLockWait } from '../support/lock-wait.js';
import { useTestDatabase } from '../support/postgres.js';
import { CLI_TEST_TIMEOUT_MS, lines, runCli, startCli } from './cli-process.js';
import { approver } from './fixtures/approver.js';
import { checkOnEvents } from '../support/wait.js';
import { startWorker, workerFor } from '../support/worker.js';
import { noInputWorkflow } from '../fixtures/no-input.js';
import { pureActivity } from '../fixtures/pure-activity.js';

const databaseUrl = useTestDatabase();

function target(schema: string): string[] {
  return ['--database-url', databaseUrl(), '--schema', schema];
}

const freshSchema = () => `cli_${randomBytes(5).toString('hex')}`;
/**
 * A clock as `runs show` prints it: the time of day, with the date in front when it falls on another day than the
 * run's creation (a run that crosses midnight UTC).
 */
const CLOCK = '(?:\\d{4}-\\d\\d-\\d\\d )?\\d\\d:\\d\\d:\\d\\d\\.\\d{3}';

function expectTerminalFriendly(text: string): void {
  for (const line of lines(text)) expect([...line].length, line).toBeLessThanOrEqual(100);
  expect(text).not.toContain('\u001b['); // stdout is a pipe here: no colours
}

/** The first event `name` of `worker` that satisfies `predicate` (waits on events, never sleeps). */
function waitFor<K extends keyof WorkerEventMap>(
  worker: Worker,
  name: K,
  predicate: (event: WorkerEventMap[K][0]) => boolean = () => true,
  timeoutMs = 30_000,
): Promise<WorkerEventMap[K][0]> {
  const events = worker.events as unknown as EventEmitter;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      events.off(name, handler);
      reject(new Error(`no ${name} event within ${timeoutMs} ms`));
    }, timeoutMs);
    function handler(event: WorkerEventMap[K][0]): void {
      if (!predicate(event)) return;
      clearTimeout(timer);
      events.off(name, handler);
      resolve(event);
    }
    events.on(name, handler);
  });
}

describe('palisade migrate', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('creates the schema, then reports it up to date (text and --json)', async () => {
    const schema = freshSchema();
    const known = (await loadMigrations()).map((m) => m.name);

    const first = await runCli(['migrate', ...target(schema)]);
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    for (const name of known) expect(first.stdout).toMatch(new RegExp(`applied\\s+${name}`));
    expectTerminalFriendly(first.stdout);

    const second = await runCli(['migrate', '--json', ...target(schema)]);
    expect(second.code).toBe(0);
    expect(JSON.parse(second.stdout)).toEqual({
      schema,
      applied: [],
      version: known.length,
      known: known.length,
    });

    const sql = postgres(databaseUrl(), { max: 1, onnotice: () => undefined });
    try {
      const rows = await sql<{ name: string }[]>`SELECT name FROM ${sql(schema)}.migrations ORDER BY id`;
      expect(rows.map((r) => r.name)).toEqual(known);
    } finally {
      await sql.end({ timeout: 1 });
    }
  });
});

describe('palisade runs', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  const schema = freshSchema();
  let engine: Engine;
  let chargeRunId: string;
  let pendingRunId: string;
  let releaseZombie: () => void = () => undefined;
  const zombieHeld = new Promise<void>((resolve) => (releaseZombie = resolve));

  const charge = defineActivity({
    name: 'charge',
    input: z.object({ invoice: z.string() }),
    output: z.object({ chargeId: z.string() }),
    retry: { maximumAttempts: 5, initialIntervalMs: 0, jitter: 0 },
    leaseMs: 60_000,
    async run(input, ctx) {
      if (ctx.info.epoch === 1) throw new ApplicationFailure('card declined', { type: 'CardDeclined' });
      if (ctx.info.epoch === 2) await zombieHeld; // superseded while it waits: its completion comes too late
      return { chargeId: `ch_${input.invoice}_${ctx.info.epoch}` };
    },
  });
  const refund = pureActivity('refund', z.object({ invoice: z.string() }), z.object({}), () => ({}));

  beforeAll(async () => {
    engine = await createEngine({ databaseUrl: databaseUrl(), schema });
    // Worker A runs one attempt at a time, so while its zombie waits it cannot claim the step again itself.
    const workerA = workerFor(engine, [charge], { concurrency: 1, workerId: 'worker-a', pollIntervalMs: 50 });
    const secondClaim = waitFor(workerA, 'attempt:claimed', (e) => e.epoch === 2);
    const staleRejected = waitFor(workerA, 'attempt:stale-rejected');
    await workerA.start();
    const run = await engine.client.enqueue(charge, { invoice: 'inv-1' }, { key: 'invoice-inv-1' });
    chargeRunId = run.runId;
    await secondClaim;

    await advanceClock(engine, 61_000); // the zombie's lease is over by the database clock
    const workerB = await startWorker(engine, [charge], { workerId: 'worker-b', pollIntervalMs: 50 });
    await expect(run.result({ timeoutMs: 30_000 })).resolves.toEqual({ chargeId: 'ch_inv-1_3' });
    releaseZombie();
    await staleRejected;
    await workerA.stop({ graceMs: 1_000 });
    await workerB.stop({ graceMs: 1_000 });

    pendingRunId = (await engine.client.enqueue(refund, { invoice: 'inv-2' })).runId; // nobody serves refund
  });

  afterAll(async () => {
    releaseZombie();
    await engine?.close({ graceMs: 0 });
  });

  it('lists runs newest first, as a table that fits 100 columns and as JSON', async () => {
    const [text, json, filtered] = await Promise.all([
      runCli(['runs', 'list', ...target(schema)]),
      runCli(['runs', 'list', '--json', ...target(schema)]),
      runCli(['runs', 'list', '--status', 'completed', '--json', ...target(schema)]),
    ]);

    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    const out = lines(text.stdout);
    expect(out[0]).toMatch(/^RUN ID\s+STATUS\s+KIND\s+NAME\s+KEY\s+CREATED \(UTC\)\s+DURATION$/);
    expect(out[1]).toMatch(
      new RegExp(`^${pendingRunId}\\s+pending\\s+act\\s+refund\\s+\\S+\\s+\\d{4}-\\d\\d-\\d\\d `),
    );
    expect(out[2]).toMatch(
      new RegExp(`^${chargeRunId}\\s+completed\\s+act\\s+charge\\s+\\S+\\s+\\d{4}-\\d\\d-\\d\\d `),
    );
    // Its key does not fit its column beside the full id and time: it is printed whole under its run.
    expect(out[3]).toBe('    key invoice-inv-1');
    expect(out).toHaveLength(4);
    expectTerminalFriendly(text.stdout);

    expect(json.code).toBe(0);
    const rows = JSON.parse(json.stdout) as { id: string; status: string; name: string; kind: string }[];
    expect(rows.map((r) => [r.id, r.status, r.name, r.kind])).toEqual([
      [pendingRunId, 'pending', 'refund', 'activity'],
      [chargeRunId, 'completed', 'charge', 'activity'],
    ]);
    expect((JSON.parse(filtered.stdout) as { id: string }[]).map((r) => r.id)).toEqual([chargeRunId]);
  });

  it('ends quietly with exit code 0 when its reader closes the pipe early (runs list | head)', async () => {
    const own = freshSchema();
    const other = await createEngine({ databaseUrl: databaseUrl(), schema: own });
    try {
      // More JSON than a pipe holds (64 KiB), so the CLI is still writing when the reader goes.
      await other.client.enqueueMany(
        refund,
        Array.from({ length: 400 }, (_, k) => ({ invoice: `inv-${k}` })),
      );
      const cli = startCli(['runs', 'list', '--json', '--limit', '1000', ...target(own)]);
      await cli.waitForOutput(/"id"/);
      cli.child.stdout?.destroy();
      const result = await cli.exited;
      expect(result.stderr).not.toMatch(/EPIPE|Unhandled/);
      expect(result.code).toBe(0);
    } finally {
      await other.close({ graceMs: 0 });
    }
  });

  it('reads DATABASE_URL when no --database-url is given', async () => {
    const result = await runCli(['runs', 'list', '--json', '--schema', schema], {
      env: { DATABASE_URL: databaseUrl() },
    });
    expect(result.code).toBe(0);
    expect((JSON.parse(result.stdout) as unknown[]).length).toBe(2);
  });

  it('shows every attempt with epoch, token, worker, outcome and duration, and the stale write with both tokens', async () => {
    const description: RunDetails = await engine.client.getHandle(chargeRunId).describe();
    const attempts = description.steps.flatMap((s) => s.attempts);
    // The arrangement itself: failed on A, superseded on A, completed on B.
    expect(attempts.map((a) => [a.epoch, a.workerId])).toEqual([
      [1, 'worker-a'],
      [2, 'worker-a'],
      [3, 'worker-b'],
    ]);
    expect(attempts[0]?.outcome).toBe('failed');
    expect(attempts[2]?.outcome).toBe('completed');
    const stale = description.events.filter((e) => e.type === 'attempt:stale-rejected');
    expect(stale).toHaveLength(1);
    const staleData = stale[0]?.data as { staleToken: string; currentToken: string; operation: string };
    expect(staleData.staleToken).toBe(attempts[1]?.token);
    expect(staleData.currentToken).toBe(attempts[2]?.token);

    const [text, json] = await Promise.all([
      runCli(['runs', 'show', chargeRunId, ...target(schema)]),
      runCli(['runs', 'show', chargeRunId, '--json', ...target(schema)]),
    ]);
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    const out = text.stdout;
    expect(out).toMatch(new RegExp(`^run\\s+${chargeRunId}$`, 'm'));
    expect(out).toMatch(/^status\s+completed$/m);
    expect(out).toMatch(/^ATTEMPTS \(3\)$/m);
    expect(out).toMatch(/^\s+STEP\s+EPOCH\s+ATT\s+TOKEN\s+WORKER\s+OUTCOME\s+CLAIMED \(UTC\)\s+DURATION$/m);
    for (const a of attempts) {
      const row = new RegExp(
        `^\\s+charge#\\d+\\s+${a.epoch}\\s+${a.attempt}\\s+${a.token}\\s+${a.workerId}\\s+${a.outcome}\\s+` +
          `${CLOCK}\\s+(\\d+ms|[\\d.]+s|\\d+m\\d\\ds)$`,
        'm',
      );
      expect(out).toMatch(row);
    }
    expect(out).toContain('↳ CardDeclined: card declined');
    expect(out).toMatch(/^REJECTED STALE WRITES \(1\)$/m);
    const zombie = attempts[1];
    expect(out).toMatch(
      new RegExp(
        `^\\s+${CLOCK}\\s+charge#\\d+\\s+${staleData.operation} rejected \\(superseded\\)\\n` +
          `\\s+stale token ${staleData.staleToken} · current token ${staleData.currentToken} · ` +
          `epoch ${zombie?.epoch} · ${zombie?.workerId}$`,
        'm',
      ),
    );
    expect(out).toMatch(/^EVENTS \(\d+\)$/m);
    expect(out).toMatch(/attempt:stale-rejected/);
    expectTerminalFriendly(out);

    expect(json.code).toBe(0);
    const shown = JSON.parse(json.stdout) as RunDetails;
    expect(shown.run.id).toBe(chargeRunId);
    expect(shown.steps.flatMap((s) => s.attempts)).toEqual(JSON.parse(JSON.stringify(attempts)));
    expect(shown.events).toEqual(JSON.parse(JSON.stringify(description.events)));
    expect(shown.turns).toEqual([]);
  });

  it('cancels a pending run, says so when asked again, and retries it', async () => {
    const cancelled = await runCli([
      'runs',
      'cancel',
      pendingRunId,
      '--reason',
      'customer withdrew',
      ...target(schema),
    ]);
    expect(cancelled.stderr).toBe('');
    expect(cancelled.code).toBe(0);
    expect(cancelled.stdout).toBe(`run ${pendingRunId} cancelled\n`);
    const afterCancel = (await engine.client.getHandle(pendingRunId).describe()).run;
    expect([afterCancel.status, afterCancel.cancelReason]).toEqual(['cancelled', 'customer withdrew']);

    const again = await runCli(['runs', 'cancel', pendingRunId, '--json', ...target(schema)]);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({
      runId: pendingRunId,
      status: 'cancelled',
      previousStatus: 'cancelled',
      cancelRequested: false,
    });

    const retried = await runCli(['runs', 'retry', pendingRunId, '--json', ...target(schema)]);
    expect(retried.stderr).toBe('');
    expect(retried.code).toBe(0);
    expect(JSON.parse(retried.stdout)).toEqual({ runId: pendingRunId, status: 'pending' });
    expect((await engine.client.getHandle(pendingRunId).describe()).run.status).toBe('pending');
  });

  it('says a run had ended when it ended while the cancel waited for its lock', async () => {
    const runId = (await engine.client.enqueue(refund, { invoice: 'inv-3' })).runId;
    const admin = postgres(databaseUrl(), { max: 1, onnotice: () => undefined });
    try {
      // The CLI reads the run pending, then its cancel waits for the run row while the run completes.
      const outcome = await afterLockWait(
        admin,
        (tx) =>
          tx`UPDATE ${tx(schema)}.runs SET status = 'completed', finished_at = now() WHERE id = ${runId}`,
        () => runCli(['runs', 'cancel', runId, '--json', ...target(schema)]),
        { timeoutMs: CLI_TEST_TIMEOUT_MS / 2 },
      );
      if (!outcome.ok) throw outcome.error;
      expect(outcome.value.code).toBe(0);
      expect(JSON.parse(outcome.value.stdout)).toEqual({
        runId,
        status: 'completed',
        previousStatus: 'completed',
        cancelRequested: false,
      });
    } finally {
      await admin.end({ timeout: 1 });
    }
  });

  it('refuses to retry a completed run with exit code 1 and the [INVALID_OPTIONS] message', async () => {
    const result = await runCli(['runs', 'retry', chargeRunId, ...target(schema)]);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(
      /^\[INVALID_OPTIONS\] .*is completed; only failed or cancelled runs can be retried/,
    );
    expect((await engine.client.getHandle(chargeRunId).describe()).run.status).toBe('completed');
  });

  it('signals a waiting workflow run, and shows its signals: taken, and pending', async () => {
    const approval = defineSignal({ name: 'approval', payload: z.object({ approved: z.boolean() }) });
    const approve = noInputWorkflow('approve', z.boolean(), async (ctx) => {
      return (await ctx.waitForSignal(approval)).approved;
    });
    const worker = await startWorker(engine, [approve], { pollIntervalMs: 60_000 });
    try {
      const handle = await engine.client.start(approve, {});
      const sent = await runCli([
        'runs',
        'signal',
        handle.runId,
        'approval',
        '{"approved":true}',
        '--json',
        ...target(schema),
      ]);
      expect(sent.stderr).toBe('');
      expect(JSON.parse(sent.stdout)).toMatchObject({ runId: handle.runId, signal: 'approval' });
      await expect(handle.result({ timeoutMs: 30_000 })).resolves.toBe(true);
      const late = await runCli(['runs', 'signal', handle.runId, 'approval', ...target(schema)]);
      expect([late.code, late.stdout]).toEqual([1, '']);
      expect(late.stderr).toMatch(/^\[RUN_ENDED\] run .* has ended \(completed\)/);
      const badJson = await runCli([
        'runs',
        'signal',
        handle.runId,
        'approval',
        '{approved',
        ...target(schema),
      ]);
      expect([badJson.code, badJson.stdout]).toEqual([1, '']);
      expect(badJson.stderr).toMatch(/^\[INVALID_OPTIONS\] .*json: is not JSON/);

      // A second run, signalled with something it never waits for: kept, shown pending.
      const other = await engine.client.start(approve, {});
      await engine.client.signal(other.runId, defineSignal({ name: 'note', payload: z.string() }), 'fyi');
      const [shown, shownOther] = await Promise.all([
        runCli(['runs', 'show', handle.runId, ...target(schema)]),
        runCli(['runs', 'show', other.runId, ...target(schema)]),
      ]);
      expect(shown.stdout).toMatch(
        new RegExp(
          `SIGNALS \\(1\\)\\n  ${CLOCK}  #\\d+  approval  taken by approval#0 at ${CLOCK}  \\{"approved":true\\}`,
        ),
      );
      expect(shownOther.stdout).toMatch(
        new RegExp(`SIGNALS \\(1, 1 pending\\)\\n  ${CLOCK}  #\\d+  note  pending  "fyi"`),
      );
      expectTerminalFriendly(shown.stdout);
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
  });

  it('refuses a signal name the run never waited for, unless --force; --module checks name and payload', async () => {
    const worker = await startWorker(engine, [approver], { pollIntervalMs: 60_000 });
    try {
      const handle = await engine.client.start(approver, {});
      // Once the run waits, it knows the name.
      await checkOnEvents(
        [worker],
        async () => (await handle.describe()).steps.some((s) => s.kind === 'signal'),
        'the approval wait',
      );
      const misspelled = await runCli(['runs', 'signal', handle.runId, 'aproval', '{}', ...target(schema)]);
      expect([misspelled.code, misspelled.stdout]).toEqual([1, '']);
      expect(misspelled.stderr).toBe(
        `[INVALID_OPTIONS] invalid runs signal: signal: run ${handle.runId} has never waited for a ` +
          'signal named "aproval" (known: approval); check the name, or pass --force to send it for a wait its ' +
          'code has not reached yet\n',
      );
      // With the worker module, a name it exports is known, and the payload is checked against its schema.
      const exported = await runCli([
        'runs',
        'signal',
        handle.runId,
        'approval',
        '{"approved":"yes"}',
        '--module',
        'test/cli/fixtures/approver.ts',
        ...target(schema),
      ]);
      expect([exported.code, exported.stdout]).toEqual([1, '']);
      expect(exported.stderr).toMatch(
        /^\[VALIDATION_FAILED\] payload of signal approval is invalid: approved: .*by: /s,
      );
      expect((await handle.describe()).signals).toEqual([]);
      // --force sends a name the run has not waited for (yet): it is kept, and undelivered when the run ends.
      const forced = await runCli(['runs', 'signal', handle.runId, 'later', '--force', ...target(schema)]);
      expect(forced.stderr).toBe('');
      expect(forced.stdout).toMatch(new RegExp(`^signal later sent to run ${handle.runId} \\(#\\d+\\)\\n$`));
      const sent = await runCli([
        'runs',
        'signal',
        handle.runId,
        'approval',
        '{"approved":true,"by":"cli"}',
        '--module',
        'test/cli/fixtures/approver.ts',
        ...target(schema),
      ]);
      expect(sent.stderr).toBe('');
      await expect(handle.result({ timeoutMs: 30_000 })).resolves.toBe('approved by cli');
      expect((await handle.describe()).signals.map((g) => [g.name, g.undelivered?.reason ?? null])).toEqual([
        ['later', 'run-ended'],
        ['approval', null],
      ]);
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
  });

  it('watches a run as it happens until its end, and resumes after a cursor of its --json lines', async () => {
    const approval = defineSignal({ name: 'approval', payload: z.object({ approved: z.boolean() }) });
    const watched = noInputWorkflow('watched', z.boolean(), async (ctx) => {
      ctx.setProgress({ stage: 'asking' });
      const { approved } = await ctx.waitForSignal(approval);
      ctx.setProgress({ stage: 'answered', approved });
      return approved;
    });
    const worker = await startWorker(engine, [watched], { pollIntervalMs: 60_000 });
    try {
      const handle = await engine.client.start(watched, {});
      const watch = startCli(['runs', 'watch', handle.runId, ...target(schema)]);
      // The watch prints the wait as it happens; only then does the signal go.
      await watch.waitForOutput(/signal:waiting/);
      await handle.signal(approval, { approved: true });
      const done = await watch.exited;
      expect([done.code, done.stderr]).toEqual([0, '']);
      const printed = lines(done.stdout);
      expect(printed.at(-1)).toMatch(new RegExp(`^${CLOCK}  run:completed +run`));
      expect(done.stdout).toMatch(/run:progress +run +\{"stage":"asking"\}/);
      expect(done.stdout).toMatch(/signal:received +approval/);
      expect(done.stdout).toMatch(/run:progress +run +\{"stage":"answered","approved":true\}/);
      expectTerminalFriendly(done.stdout);

      const json = await runCli(['runs', 'watch', handle.runId, '--json', ...target(schema)]);
      const events = lines(json.stdout).map((line) => JSON.parse(line) as { id: string; cursor: string });
      expect(events.map((e) => e.id)).toEqual((await handle.describe()).events.map((e) => e.id));
      const resumed = await runCli([
        'runs',
        'watch',
        handle.runId,
        '--json',
        '--after',
        events[1]!.cursor,
        ...target(schema),
      ]);
      expect(lines(resumed.stdout).map((line) => (JSON.parse(line) as { id: string }).id)).toEqual(
        events.slice(2).map((e) => e.id),
      );
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
  });

  it('shows when a step was due and, under its own label, until when its lease holds', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const slow = defineActivity({
      name: 'slow',
      input: z.object({}),
      output: z.object({}),
      leaseMs: 30_000,
      run: () => held.then(() => ({})),
    });
    const holds = defineWorkflow({
      name: 'holds',
      input: z.object({}),
      output: z.object({}),
      run: (_input, ctx) => ctx.run(slow, {}),
    });
    // The worker that runs the workflow also serves the activity: the turn's commit grants it the step at once.
    const worker = engine.worker({ workflows: [holds], activities: [slow], pollIntervalMs: 50 });
    await worker.start();
    try {
      const handle = await engine.client.start(holds, {});
      await checkOnEvents(
        [worker],
        async () => (await handle.describe()).steps[0]?.status === 'running',
        'the step running',
      );
      const { steps, events } = await handle.describe();
      const scheduled = events.find((e) => e.type === 'step:scheduled');
      const claimed = events.find((e) => e.type === 'attempt:claimed');
      const dueAt = new Date((scheduled?.data as { dueAt: string }).dueAt);
      const leaseUntil = new Date((claimed?.data as { leaseExpiresAt: string }).leaseExpiresAt);
      // Due when it was scheduled (and granted); the lease is another time, under its own name.
      expect(dueAt.getTime()).toBe(scheduled?.at.getTime());
      expect(leaseUntil.getTime()).toBeGreaterThanOrEqual(dueAt.getTime() + 29_000);
      expect([steps[0]?.nextRunAt, steps[0]?.leaseExpiresAt?.getTime()]).toEqual([
        null,
        leaseUntil.getTime(),
      ]);

      const shown = await runCli(['runs', 'show', handle.runId, ...target(schema)]);
      const clock = (d: Date) => `(?:\\d{4}-\\d\\d-\\d\\d )?${d.toISOString().slice(11, 23)}`;
      expect(shown.stdout).toMatch(new RegExp(`step:scheduled +slow#0 +due at ${clock(dueAt)}$`, 'm'));
      expect(shown.stdout).toMatch(
        new RegExp(
          `attempt:claimed +slow#0 +epoch 1 · token \\d+ · lease until ${clock(leaseUntil)} · `,
          'm',
        ),
      );
      expectTerminalFriendly(shown.stdout);
    } finally {
      release();
      await worker.stop({ graceMs: 1_000 });
    }
  });

  it('links a parent and its child runs both ways in runs show', async () => {
    const leaf = defineWorkflow({
      name: 'leaf',
      input: z.object({ n: z.number() }),
      output: z.number(),
      run: ({ n }) => Promise.resolve(n + 1),
    });
    const tree = noInputWorkflow('tree', z.number(), async (ctx) => {
      return (await ctx.runChild(leaf, { n: 1 })) + (await ctx.runChild(leaf, { n: 2 }));
    });
    const worker = await startWorker(engine, [tree, leaf], { pollIntervalMs: 50 });
    try {
      const handle = await engine.client.start(tree, {});
      await expect(handle.result({ timeoutMs: 30_000 })).resolves.toBe(5);
      const [first] = (await handle.describe()).children;
      const [shownParent, shownChild] = await Promise.all([
        runCli(['runs', 'show', handle.runId, ...target(schema)]),
        runCli(['runs', 'show', first!.id, ...target(schema)]),
      ]);
      expect(shownParent.stdout).toMatch(
        new RegExp(
          `CHILDREN \\(2\\)\\n  ${CLOCK}  ${first!.id}  completed  leaf \\(step 0\\)\\n  ${CLOCK}  [0-9a-f-]{36}  completed  leaf \\(step 1\\)`,
        ),
      );
      expect(shownChild.stdout).toMatch(new RegExp(`parent +${handle.runId} \\(it started this run\\)`));
      expectTerminalFriendly(shownParent.stdout);
    } finally {
      await worker.stop({ graceMs: 1_000 });
    }
  });

  it('exits 1 with [RUN_NOT_FOUND] for an unknown run id', async () => {
    const unknown = randomUUID();
    const results = await Promise.all(
      [
        ...(['show', 'watch', 'cancel', 'retry'] as const).map((command) => [command, unknown]),
        ['signal', unknown, 'go'],
      ].map((args) => runCli(['runs', ...args, ...target(schema)])),
    );
    for (const result of results) {
      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toBe(
        `[RUN_NOT_FOUND] run ${unknown} does not exist; check the id (runs list shows existing runs)\n`,
      );
    }
  });

  it('exits 2 with the usage on bad arguments', async () => {
    const cases: [string[], RegExp][] = [
      [['runs', 'show'], /error: missing required argument 'id'[\s\S]*Usage: palisade runs show/],
      [
        ['runs', 'list', '--limit', '0'],
        /--limit <n>' argument '0' is invalid[\s\S]*Usage: palisade runs list/,
      ],
      [
        ['runs', 'list', '--status', 'sleeping'],
        /argument 'sleeping' is invalid[\s\S]*Usage: palisade runs list/,
      ],
      [['runs', 'frobnicate'], /error: unknown command 'frobnicate'/],
      [['worker'], /error: missing required argument 'module'[\s\S]*Usage: palisade worker/],
      [
        ['worker', 'cli/fixtures/greeter.ts', '--prefetch', '-1'],
        /--prefetch <n>' argument '-1' is invalid\. must be a whole number from 0 to 1000[\s\S]*Usage: palisade worker/,
      ],
      [
        ['--data-dir', '/tmp/x', '--database-url', 'postgres://h/d', 'runs', 'list'],
        /either --database-url or --data-dir/,
      ],
    ];
    const results = await Promise.all(cases.map(([args]) => runCli([...args, '--schema', schema])));
    for (const [i, result] of results.entries()) {
      expect(result.code, cases[i]?.[0].join(' ')).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(cases[i]?.[1] as RegExp);
    }
  });

  it('refuses to read a schema that was never migrated, and says how to fix it', async () => {
    const result = await runCli(['runs', 'list', ...target(freshSchema())]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      /^\[INVALID_OPTIONS\] no Palisade schema cli_\w+ in postgres:.*Run `palisade migrate`/,
    );
  });
});
