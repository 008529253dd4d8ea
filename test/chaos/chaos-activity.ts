/**
 * The chaos suite's test activity, `chaos-loop`, served by worker processes (test/fixtures/worker-main.ts loads
 * this module through `WorkerProcessConfig.extensionModule`) and enqueued by scenarios (./harness.ts).
 *
 * Each loop iteration: a fenced write (`ctx.fencedTransaction` inserting an `effects` row with `fenced = true`),
 * an unfenced write (the same row through a plain postgres.js connection, `fenced = false`: a system that
 * ignores tokens), then a short sleep. Every row records the step, the attempt's token, the worker, the
 * iteration and the database's clock. Every operation is reported over IPC as a `chaos:op` message in Jepsen's
 * invoke / ok / fail / info style, with the worker's wall time (the same clock as the DB's on one host).
 *
 * A `pause` holds one fenced transaction open at a chosen point (reported as `chaos:pause` with the backend pid,
 * so a scenario can SIGSTOP the process or terminate the backend there): after the user's INSERT and before the
 * fence (`before-fence`), inside a long user statement (`in-statement`: `pg_sleep`), or after the fence UPDATE and
 * before COMMIT (`before-commit`, through the engine's `fenced-transaction:before-commit` fault hook).
 *
 * A `batch` gathers the step with others before it returns, so a scenario gets a batched completion of a known
 * size (the worker's completion batcher sends completions that arrive in one tick in one statement), and may
 * hold that statement before it is sent (reported as `chaos:batch`, released by the parent's
 * `release-completion` command) to fault the worker or the database while the batch is in flight.
 *
 * The loop is a cooperative activity: it stops at the first failed fenced write and, when `honourSignal` is
 * set, as soon as `ctx.signal` fires (checked before each write and during the sleep).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { sql as drizzleSql } from 'drizzle-orm';
import { z } from 'zod';
import { createFencedResource } from '@palisade/engine';
import type postgres from '@palisade/engine/postgres';
import { setFaultHook, type CompletionAnswer, type TurnFault } from '@palisade/engine/testing';
import { ApplicationFailure, defineActivity, defineWorkflow, type ActivityContext } from '@palisade/sdk';
import {
  attemptInfo,
  blockEventLoop,
  blockTurnHere,
  blockTurnSchema,
  blockInThread,
  errorInfo,
  type FixtureEnvironment,
} from '../fixtures/activities.js';
import type { ActivityCommand, FixtureTimings } from '../fixtures/worker-protocol.js';

type AttemptRef = CompletionAnswer['attempt'];

export const CHAOS_ACTIVITY = 'chaos-loop';
export const CHAOS_WORKFLOW = 'chaos-flow';

/** The `effects` table of the chaos activity, in the engine's schema `schema`. */
export function effectsTableDdl(schema: string): string {
  const q = `"${schema}"`;
  return `
    CREATE TABLE ${q}.effects (
      id bigserial PRIMARY KEY,
      run_id uuid NOT NULL,
      step_id uuid NOT NULL,
      fencing_token bigint NOT NULL,
      worker_id text NOT NULL,
      seq integer NOT NULL,
      fenced boolean NOT NULL,
      -- How a fenced effect was fenced: by the engine (ctx.fencedTransaction) or by a fenced resource that keeps
      -- the highest token per ctx.info.fencing.scope (createFencedResource).
      via text NOT NULL DEFAULT 'transaction',
      -- The step's position in its run: with run_id, the unit of work the checker judges resource fences by.
      step_seq integer NOT NULL DEFAULT 0,
      scope text,
      db_time timestamptz NOT NULL DEFAULT clock_timestamp(),
      engine_time timestamptz NOT NULL DEFAULT ${q}."now"(),
      UNIQUE (step_id, fencing_token, seq, fenced, via));
    -- One record per unit of work (a fencing scope), written by the activity's \`ledger\` option through a fenced
    -- resource: an effect that must exist once, whatever the attempts. \`writes\` counts the writes it accepted.
    CREATE TABLE ${q}.ledger (
      scope text PRIMARY KEY,
      run_id uuid NOT NULL,
      fencing_token bigint NOT NULL,
      worker_id text NOT NULL,
      writes integer NOT NULL);`;
}

export const chaosInput = z.object({
  /** Loop iterations (each: fenced write, unfenced write, sleep). */
  iterations: z.number().int().positive(),
  /** @defaultValue 50 */
  sleepMs: z.number().int().nonnegative().default(50),
  /** Stop as soon as `ctx.signal` fires. @defaultValue true */
  honourSignal: z.boolean().default(true),
  /** Block synchronously before iteration `atSeq`, on the attempt with epoch `onEpoch` only. */
  block: z
    .object({
      atSeq: z.number().int().nonnegative(),
      ms: z.number().int().positive(),
      where: z.enum(['main', 'thread']),
      onEpoch: z.number().int().positive().default(1),
    })
    .optional(),
  /** Hold the fenced transaction of iteration `atSeq` (attempt `onEpoch` only) at `point` for `ms`. */
  pause: z
    .object({
      atSeq: z.number().int().nonnegative(),
      point: z.enum(['before-fence', 'in-statement', 'before-commit']),
      ms: z.number().int().positive(),
      onEpoch: z.number().int().positive().default(1),
    })
    .optional(),
  /**
   * Each iteration also writes an `effects` row (`via = 'resource'`) through a fenced resource on the engine's
   * `fences` table, fenced by `ctx.info.fencing` (its scope names the unit of work). @defaultValue false
   */
  resource: z.boolean().default(false),
  /** Throw a non-retryable failure after the iterations (a step for a workflow to compensate). @defaultValue false */
  fail: z.boolean().default(false),
  /**
   * Gather before returning, on worker `workerId` only: the step waits after its iterations until `size` steps with
   * this `key` have reached the same point in this worker process, and all of them return in the same tick, so
   * their completions go in one batched statement. An attempt that loses its lease while waiting leaves the
   * gathering, and the step's next attempt on this worker takes its place; once a gathering went, later attempts
   * of its steps return at once. With `hold`, the gathered batch's statement waits before it is sent (reported as
   * `chaos:batch` phase `held`) until the parent sends `release-completion` for one of its attempts.
   * Installs the `completion:*` fault hooks that report every batch of this worker (`chaos:batch`).
   */
  batch: z
    .object({
      key: z.string(),
      size: z.number().int().min(2),
      hold: z.boolean().default(false),
      workerId: z.string(),
    })
    .optional(),
  /**
   * Hold this step's completion statement before it is sent, on its first attempt only (epoch 1), reported as
   * `chaos:batch` phase `held` until the parent's `release-completion` names the attempt: a batch of one, with no
   * gathering (for a workflow's step, whose completion then claims the run's next turn). @defaultValue false
   */
  holdCompletion: z.boolean().default(false),
  /** Returned in the output, so a scenario can recognise this step's completion on the wire. */
  tag: z.string().optional(),
  /**
   * After the iterations, record this unit of work in the `ledger` table (one row per fencing scope, upserted with
   * the attempt's token) through a fenced resource keyed by `ctx.info.fencing`: an external effect that must exist
   * once, which a superseded attempt can no longer write. @defaultValue false
   */
  ledger: z.boolean().default(false),
});
export type ChaosInput = z.input<typeof chaosInput>;

const chaosOutput = z.object({ iterations: z.number().int(), tag: z.string().optional() });

/** The `chaos-loop` definition; `env` only in a worker process (the parent uses it to enqueue). */
export function chaosActivity(timings: FixtureTimings, env?: FixtureEnvironment) {
  return defineActivity({
    name: CHAOS_ACTIVITY,
    input: chaosInput,
    output: chaosOutput,
    leaseMs: timings.leaseMs,
    startToCloseTimeoutMs: timings.startToCloseTimeoutMs ?? 120_000,
    ...(timings.retry ? { retry: timings.retry } : {}),
    async run(input, ctx) {
      if (!env) throw new Error('chaos-loop runs only inside a worker process');
      return runLoop(input, ctx, env);
    },
  });
}

async function runLoop(
  input: z.output<typeof chaosInput>,
  ctx: ActivityContext,
  env: FixtureEnvironment,
): Promise<{ iterations: number; tag?: string }> {
  const attempt = attemptInfo(ctx);
  const { report } = env;
  const effects = `"${env.schema}"."effects"`;
  const token = ctx.info.fencing.token.toString();
  report({ type: 'fixture:started', activity: CHAOS_ACTIVITY, attempt, epoch: ctx.info.epoch });
  const onAbort = (): void => {
    const reason: unknown = ctx.signal.reason;
    report({
      type: 'chaos:op',
      attempt,
      op: 'signal',
      phase: 'info',
      seq: -1,
      reason: (reason as { reason?: string } | undefined)?.reason,
    });
  };
  if (ctx.signal.aborted) onAbort();
  else ctx.signal.addEventListener('abort', onAbort, { once: true });
  const stopIfAborted = (): void => {
    if (input.honourSignal && ctx.signal.aborted) throw ctx.signal.reason;
  };

  let seq = 0;
  try {
    for (; seq < input.iterations; seq++) {
      stopIfAborted();
      const block = input.block;
      if (block && block.atSeq === seq && block.onEpoch === ctx.info.epoch) {
        report({ type: 'fixture:blocking', attempt, ms: block.ms, where: block.where });
        if (block.where === 'main') blockEventLoop(block.ms);
        else await blockInThread(block.ms, ctx.signal);
        report({ type: 'fixture:unblocked', attempt, where: block.where });
        stopIfAborted();
      }

      if (input.resource) await resourceWrite(ctx, env, attempt, seq);

      const pause =
        input.pause?.atSeq === seq && input.pause.onEpoch === ctx.info.epoch ? input.pause : undefined;
      report({ type: 'chaos:op', attempt, op: 'fenced-write', phase: 'invoke', seq });
      try {
        await ctx.fencedTransaction(async (tx) => {
          await tx.execute(drizzleSql`
            INSERT INTO ${drizzleSql.raw(effects)} (run_id, step_id, fencing_token, worker_id, seq, fenced)
            VALUES (${ctx.info.runId}, ${ctx.info.stepId}, ${token}::bigint, ${ctx.info.workerId}, ${seq}, true)`);
          if (!pause) return;
          const result: unknown = await tx.execute(drizzleSql`SELECT pg_backend_pid() AS pid`);
          const rows = result as readonly { pid: number }[];
          const held = { type: 'chaos:pause', attempt, seq, point: pause.point, ms: pause.ms } as const;
          const backendPid = Number(rows[0]?.pid);
          if (pause.point === 'before-commit') {
            // One-shot: the engine calls it after this transaction's fence, before its COMMIT.
            setFaultHook('fenced-transaction:before-commit', async () => {
              setFaultHook('fenced-transaction:before-commit', undefined);
              report({ ...held, backendPid });
              await sleep(pause.ms);
            });
          } else if (pause.point === 'before-fence') {
            report({ ...held, backendPid });
            await sleep(pause.ms);
          } else {
            report({ ...held, backendPid });
            await tx.execute(drizzleSql`SELECT pg_sleep(${pause.ms / 1000})`);
          }
        });
      } catch (error) {
        // A fenced write that threw did not commit, except when its COMMIT's outcome is unknown: a connection
        // error (no SQLSTATE-typed engine error) is reported as indeterminate.
        const info = errorInfo(error);
        const sure = info.code === 'LEASE_LOST' || info.code === 'ATTEMPT_ABORTED';
        report({
          type: 'chaos:op',
          attempt,
          op: 'fenced-write',
          phase: sure ? 'fail' : 'info',
          seq,
          error: info,
        });
        throw error;
      }
      report({ type: 'chaos:op', attempt, op: 'fenced-write', phase: 'ok', seq });

      stopIfAborted();
      report({ type: 'chaos:op', attempt, op: 'unfenced-write', phase: 'invoke', seq });
      try {
        await env.sql.unsafe(
          `INSERT INTO ${effects} (run_id, step_id, fencing_token, worker_id, seq, fenced)
           VALUES ($1, $2, $3::bigint, $4, $5, false)`,
          [ctx.info.runId, ctx.info.stepId, token, ctx.info.workerId, seq],
        );
      } catch (error) {
        report({
          type: 'chaos:op',
          attempt,
          op: 'unfenced-write',
          phase: 'info',
          seq,
          error: errorInfo(error),
        });
        throw error;
      }
      report({ type: 'chaos:op', attempt, op: 'unfenced-write', phase: 'ok', seq });

      if (input.sleepMs > 0) {
        await sleep(input.sleepMs, undefined, input.honourSignal ? { signal: ctx.signal } : {}).catch(() => {
          throw ctx.signal.reason;
        });
      }
    }
    if (input.ledger) await ledgerWrite(ctx, env, attempt);
    if (input.batch && input.batch.workerId === ctx.info.workerId) await gather(input.batch, ctx, env);
    if (input.holdCompletion && ctx.info.epoch === 1) {
      installBatchProbe(env);
      heldTokens.add(token);
    }
    if (input.fail) throw new ApplicationFailure('chaos-loop failed on purpose', { nonRetryable: true });
    report({ type: 'fixture:ended', attempt, outcome: 'returned' });
    return { iterations: seq, ...(input.tag !== undefined ? { tag: input.tag } : {}) };
  } catch (error) {
    report({ type: 'fixture:ended', attempt, outcome: 'threw', error: errorInfo(error) });
    throw error;
  } finally {
    setFaultHook('fenced-transaction:before-commit', undefined);
  }
}

/** Steps waiting at a `batch` gathering, by key: each one's release. */
const gatherings = new Map<string, (() => void)[]>();
/** Keys of the gatherings that went. */
const gathered = new Set<string>();
/** Tokens of the attempts whose completion must be held before it is sent (`batch.hold`). */
const heldTokens = new Set<string>();
/** How long a gathering or a held batch may wait before it goes anyway, so a lost wave never wedges a worker. */
const GATHER_TIMEOUT_MS = 30_000;
let batchProbeInstalled = false;

/**
 * Wait until `batch.size` steps of `batch.key` arrived here, then let all of them go in the same tick (their
 * completions then join one statement). Ends early, throwing, when the attempt's signal fires.
 */
async function gather(
  batch: NonNullable<z.output<typeof chaosInput>['batch']>,
  ctx: ActivityContext,
  env: FixtureEnvironment,
): Promise<void> {
  installBatchProbe(env);
  if (gathered.has(batch.key)) return;
  if (batch.hold) heldTokens.add(ctx.info.fencing.token.toString());
  const waiting = gatherings.get(batch.key) ?? [];
  gatherings.set(batch.key, waiting);
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(go, GATHER_TIMEOUT_MS);
    const onAbort = (): void => {
      clearTimeout(timer);
      const at = waiting.indexOf(go);
      if (at >= 0) waiting.splice(at, 1);
      reject(ctx.signal.reason as Error);
    };
    function go(): void {
      clearTimeout(timer);
      ctx.signal.removeEventListener('abort', onAbort);
      resolve();
    }
    if (ctx.signal.aborted) return onAbort();
    ctx.signal.addEventListener('abort', onAbort, { once: true });
    waiting.push(go);
    if (waiting.length >= batch.size) {
      gatherings.delete(batch.key);
      gathered.add(batch.key);
      for (const release of waiting) release();
    }
  });
}

/**
 * Once per worker process: report every batched completion statement (`chaos:batch`), and hold the one that
 * carries a `batch.hold` attempt before it is sent, until the parent's `release-completion` names one of its
 * attempts (or {@link GATHER_TIMEOUT_MS} passed). A batch is held once: its retries go at once.
 */
function installBatchProbe(env: FixtureEnvironment): void {
  if (batchProbeInstalled) return;
  batchProbeInstalled = true;
  const info = (a: AttemptRef) => ({
    runId: a.runId,
    stepId: a.stepId,
    attempt: a.attempt,
    token: a.token.toString(),
  });
  setFaultHook('completion:before-send', async (batch) => {
    const rows = batch.map((a) => ({ attempt: info(a) }));
    const tokens = new Set(rows.map((r) => r.attempt.token));
    if (![...tokens].some((t) => heldTokens.has(t))) {
      env.report({ type: 'chaos:batch', phase: 'sending', rows });
      return;
    }
    for (const t of tokens) heldTokens.delete(t);
    await heldUntil(
      env,
      (command) => command.action === 'release-completion' && tokens.has(command.token),
      () => {
        env.report({ type: 'chaos:batch', phase: 'held', rows });
      },
    );
    env.report({ type: 'chaos:batch', phase: 'sending', rows });
  });
  setFaultHook('completion:after-commit', (answers) => {
    env.report({
      type: 'chaos:batch',
      phase: 'answered',
      rows: answers.map((a) => ({ attempt: info(a.attempt), outcome: a.outcome })),
    });
    return Promise.resolve();
  });
}

/**
 * One write through a fenced resource keyed by `ctx.info.fencing` (what a system outside the engine does with
 * the token), reported as `resource-write` ops. Refused (a newer attempt of the same unit of work wrote first),
 * it throws, which ends the loop.
 */
function resourceWrite(
  ctx: ActivityContext,
  env: FixtureEnvironment,
  attempt: ReturnType<typeof attemptInfo>,
  seq: number,
): Promise<void> {
  const { scope, token } = ctx.info.fencing;
  return reportedFencedWrite(ctx, env, attempt, seq, (tx) =>
    tx.unsafe(
      `INSERT INTO "${env.schema}".effects (run_id, step_id, fencing_token, worker_id, seq, fenced, via, step_seq, scope)
         VALUES ($1, $2, $3::bigint, $4, $5, true, 'resource', $6, $7)`,
      [ctx.info.runId, ctx.info.stepId, token.toString(), ctx.info.workerId, seq, ctx.info.seq, scope],
    ),
  );
}

/**
 * The `ledger` write (see {@link chaosInput}): upsert the unit of work's one row through a fenced resource keyed by
 * `ctx.info.fencing`, reported as a `resource-write` op (seq -1). Refused (a newer attempt of the same unit wrote
 * first), it throws.
 */
function ledgerWrite(
  ctx: ActivityContext,
  env: FixtureEnvironment,
  attempt: ReturnType<typeof attemptInfo>,
): Promise<void> {
  const { scope, token } = ctx.info.fencing;
  return reportedFencedWrite(ctx, env, attempt, -1, (tx) =>
    tx.unsafe(
      `INSERT INTO "${env.schema}".ledger (scope, run_id, fencing_token, worker_id, writes)
           VALUES ($1, $2, $3::bigint, $4, 1)
           ON CONFLICT (scope) DO UPDATE SET fencing_token = excluded.fencing_token, worker_id = excluded.worker_id,
                                             writes = ledger.writes + 1`,
      [scope, ctx.info.runId, token.toString(), ctx.info.workerId],
    ),
  );
}

/**
 * `write` through a fenced resource keyed by `ctx.info.fencing`, reported as `resource-write` ops numbered `seq`:
 * `invoke`, then `ok`, or — refused or failed — `fail` (LEASE_LOST) or `info`, and the error rethrown. A writer
 * frozen inside its write must not hold the scope's row past half a lease (the suite's L is 2 s).
 */
async function reportedFencedWrite(
  ctx: ActivityContext,
  env: FixtureEnvironment,
  attempt: ReturnType<typeof attemptInfo>,
  seq: number,
  write: (tx: postgres.TransactionSql) => Promise<unknown>,
): Promise<void> {
  env.report({ type: 'chaos:op', attempt, op: 'resource-write', phase: 'invoke', seq });
  try {
    await createFencedResource({ sql: env.sql, schema: env.schema, idleInTransactionTimeoutMs: 1_000 }).write(
      ctx.info.fencing,
      write,
    );
  } catch (error) {
    const info = errorInfo(error);
    env.report({
      type: 'chaos:op',
      attempt,
      op: 'resource-write',
      phase: info.code === 'LEASE_LOST' ? 'fail' : 'info',
      seq,
      error: info,
    });
    throw error;
  }
  env.report({ type: 'chaos:op', attempt, op: 'resource-write', phase: 'ok', seq });
}

export const chaosFlowInput = z.object({
  /** `chaos-loop` steps run one after the other; step i is scheduled by the run's turn i + 1. */
  steps: z.number().int().positive(),
  /** Loop iterations of each step. */
  iterations: z.number().int().positive(),
  /**
   * BLOCK the event loop of the turn whose `ctx.info.turnAttempt` is this, for `ms`, after it was handed the
   * results of the steps before and before it schedules the next one (mid-turn: it holds the turn lease and has
   * committed nothing); reported as `fixture:turn-blocking`. A replay has a later turnAttempt and does not block.
   */
  blockTurn: blockTurnSchema,
  /**
   * Instead of \`steps\`: \`try { step 0 fails } catch { step 1 compensates }\`, where the compensation writes through a
   * fenced resource, keeps going after its signal fires (a zombie) and may be retried \`maximumAttempts\` times.
   */
  compensate: z
    .object({ iterations: z.number().int().positive(), maximumAttempts: z.number().int().positive() })
    .optional(),
  /** Each step records its unit of work in the `ledger` table (the loop's `ledger` option). @defaultValue false */
  ledger: z.boolean().default(false),
  /** Step i's tag is `<label>/step-<i>` (unique on the wire when the label is), instead of `step-<i>`. */
  label: z.string().optional(),
  /**
   * Hold the run at an eager grant around step `step`, once, on the worker that meets it (./chaos-activity.ts
   * {@link installTurnHolds}): `turn:before-run` / `turn:before-commit` the turn that schedules step `step` (turn
   * attempt `step + 1`, held only when a completion claimed it eagerly), `dispatch:before-start` the steps that
   * turn's commit granted the worker, `completion` the completion statement of step `step` (`holdCompletion`).
   */
  hold: z
    .object({
      point: z.enum(['turn:before-run', 'turn:before-commit', 'dispatch:before-start', 'completion']),
      step: z.number().int().nonnegative(),
    })
    .optional(),
});
export type ChaosFlowInput = z.input<typeof chaosFlowInput>;

/** `chaos-flow`: a workflow of `chaos-loop` steps, so turn faults meet the chaos checker's effects. */
export function chaosWorkflow(
  loop: ReturnType<typeof chaosActivity>,
  env?: Pick<FixtureEnvironment, 'report'>,
) {
  return defineWorkflow({
    name: CHAOS_WORKFLOW,
    input: chaosFlowInput,
    output: z.array(chaosOutput),
    async run(input, ctx) {
      const results: z.output<typeof chaosOutput>[] = [];
      const c = input.compensate;
      if (c) {
        try {
          await ctx.run(loop, { iterations: 1, fail: true, tag: 'fails' }, { retry: { maximumAttempts: 1 } });
        } catch {
          const input = { iterations: c.iterations, resource: true, honourSignal: false, tag: 'compensate' };
          results.push(
            await ctx.run(loop, input, { retry: { maximumAttempts: c.maximumAttempts, jitter: 0 } }),
          );
        }
        return results;
      }
      const hold = input.hold;
      if (hold && hold.point !== 'completion') {
        turnHolds.set(ctx.info.runId, { point: hold.point, turnAttempt: hold.step + 1 });
      }
      for (let i = 0; i < input.steps; i++) {
        blockTurnHere(ctx, input.blockTurn, env?.report);
        const tag = input.label === undefined ? `step-${i}` : `${input.label}/step-${i}`;
        const holdCompletion = hold?.point === 'completion' && hold.step === i;
        results.push(
          await ctx.run(loop, {
            iterations: input.iterations,
            tag,
            ...(holdCompletion ? { holdCompletion } : {}),
            ...(input.ledger ? { ledger: true } : {}),
          }),
        );
      }
      return results;
    },
  });
}

const LAG_PROBE_MS = 20;
const LAG_REPORT_MS = 250;

/**
 * Entry point for worker-main's `extensionModule`: the activities this suite adds to a worker process. Also
 * starts an event-loop lag probe (a 20 ms timer whose lateness is measured), reported as `chaos:lag` every
 * 250 ms, so bounds such as T8's H + T_hb + λ use the lag the worker really had.
 */
export function extensionActivities(env: FixtureEnvironment, timings: FixtureTimings) {
  let expected = performance.now() + LAG_PROBE_MS;
  let maxLagMs = 0;
  let lastReport = performance.now();
  setInterval(() => {
    const now = performance.now();
    maxLagMs = Math.max(maxLagMs, now - expected);
    expected = now + LAG_PROBE_MS;
    if (now - lastReport >= LAG_REPORT_MS) {
      env.report({ type: 'chaos:lag', maxLagMs: Math.round(maxLagMs) });
      maxLagMs = 0;
      lastReport = now;
    }
  }, LAG_PROBE_MS).unref();
  return [chaosActivity(timings, env)];
}

/** Entry point for worker-main's `extensionModule`: the workflows this suite adds to a worker process. */
export function extensionWorkflows(env: FixtureEnvironment, timings: FixtureTimings) {
  installTurnHolds(env);
  return [chaosWorkflow(chaosActivity(timings, env), env)];
}

type TurnHoldPoint = 'turn:before-run' | 'turn:before-commit' | 'dispatch:before-start';

/** Runs whose `chaos-flow` asked for a hold (`hold`), armed by the workflow's code in this process: one-shot. */
const turnHolds = new Map<string, { point: TurnHoldPoint; turnAttempt: number }>();

/**
 * Attach the engine's turn fault points in this worker process: a turn of a run armed in {@link turnHolds}, at
 * the armed point and turn attempt (an eagerly granted turn only, for the turn points), is reported as
 * `chaos:hold` and waits until the parent's `release-hold` names its turn token (or {@link GATHER_TIMEOUT_MS}).
 * Turns of other runs pass at once.
 */
/**
 * Hold here until a scenario's command satisfies `releases`, or GATHER_TIMEOUT_MS passed (so a scenario that
 * failed cannot hang the worker); `announce` runs once the command listener is in place, to report the hold.
 */
function heldUntil(
  env: FixtureEnvironment,
  releases: (command: ActivityCommand) => boolean,
  announce: () => void,
): Promise<void> {
  return new Promise<void>((resolve) => {
    const timer = setTimeout(release, GATHER_TIMEOUT_MS);
    function release(): void {
      clearTimeout(timer);
      env.commands?.off('command', onCommand);
      resolve();
    }
    function onCommand(command: ActivityCommand): void {
      if (releases(command)) release();
    }
    env.commands?.on('command', onCommand);
    announce();
  });
}

function installTurnHolds(env: FixtureEnvironment): void {
  const hold = async (point: TurnHoldPoint, turn: TurnFault, steps: readonly AttemptRef[]): Promise<void> => {
    const armed = turnHolds.get(turn.runId);
    if (armed?.point !== point || armed.turnAttempt !== turn.turnAttempt) return;
    if (point !== 'dispatch:before-start' && turn.grant !== 'eager') return;
    turnHolds.delete(turn.runId);
    const token = turn.token.toString();
    await heldUntil(
      env,
      (command) => command.action === 'release-hold' && command.token === token,
      () => {
        env.report({
          type: 'chaos:hold',
          point,
          runId: turn.runId,
          token,
          turnAttempt: turn.turnAttempt,
          grant: turn.grant,
          steps: steps.map((a) => ({
            runId: a.runId,
            stepId: a.stepId,
            attempt: a.attempt,
            token: a.token.toString(),
          })),
        });
      },
    );
  };
  setFaultHook('turn:before-run', (turn) => hold('turn:before-run', turn, []));
  setFaultHook('turn:before-commit', (turn) => hold('turn:before-commit', turn, []));
  setFaultHook('dispatch:before-start', (turn, granted) => hold('dispatch:before-start', turn, granted));
}
