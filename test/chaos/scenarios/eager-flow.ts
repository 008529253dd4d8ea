/**
 * Shared by the eager-grant scenarios (T20–T24): a `chaos-flow` run of {@link FLOW_STEPS} short sequential steps
 * on one worker. Once its first turn is claimed, every step is granted by the commit of the turn that schedules
 * it (eager dispatch) and every later turn by the completion statement of the step before (an eager turn), so a
 * fault placed at one of those grants (the flow's `hold` option, ../chaos-activity.ts) meets an eager grant.
 */
import type { ChildMessageOf } from '../../fixtures/worker-protocol.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import { terminateWhileLocked } from '../backend-faults.js';
import type { Grant } from '../checker.js';
import type { ScenarioContext } from '../harness.js';
import { dropReply } from '../proxy-faults.js';
import type { TcpProxy } from '../../support/tcp-proxy.js';
import { expectAnsweredOnce, expectNoneStale, rejectedCompletions, stepGrants } from './completions.js';

/** Steps of each flow: step 0 follows the claimed first turn, steps 1… are held at eager turns. */
export const FLOW_STEPS = 3;

export type HoldPoint = 'turn:before-run' | 'turn:before-commit' | 'dispatch:before-start' | 'completion';
export type HoldMessage = ChildMessageOf<'chaos:hold'>;

export interface EagerFlow {
  readonly runId: string;
  readonly label: string;
  /** Step i's tag (its input and output carry it: the statements that schedule and complete it, on the wire). */
  readonly tags: readonly string[];
}

/** Start a flow, held at `point` around step `step` if given (see `chaos-flow`'s `hold`). */
export async function startEagerFlow(
  ctx: ScenarioContext,
  name: string,
  hold?: { point: HoldPoint; step: number },
): Promise<EagerFlow> {
  const label = `${name}-${ctx.rng.seed}-${ctx.rng.int(0, 1e9)}`;
  const { runId } = await ctx.startWorkflow({
    steps: FLOW_STEPS,
    iterations: 2,
    label,
    ...(hold ? { hold } : {}),
  });
  return { runId, label, tags: Array.from({ length: FLOW_STEPS }, (_, i) => `${label}/step-${i}`) };
}

/** The hold `worker` reported for `flow` at `point`. */
export function waitForHold(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  flow: EagerFlow,
  point: HoldMessage['point'],
): Promise<HoldMessage> {
  return worker.waitFor('chaos:hold', (m) => m.runId === flow.runId && m.point === point, {
    timeoutMs: 10 * ctx.timings.leaseMs + 20_000,
  });
}

/** Start a flow held at `point` around step `step` (see `chaos-flow`'s `hold`), and the hold `worker` reports. */
export async function startHeldTurn(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  name: string,
  point: HoldMessage['point'],
  step: number,
): Promise<{ flow: EagerFlow; held: HoldMessage }> {
  const flow = await startEagerFlow(ctx, name, { point, step });
  return { flow, held: await waitForHold(ctx, worker, flow, point) };
}

/** The attempt whose completion a worker holds before sending it ('' where the held batch has no row). */
export interface HeldCompletion {
  readonly token: string;
  readonly stepId: string;
}

/**
 * The completion `worker` holds before sending it, for a flow started with hold point `completion` (the
 * `chaos:batch` message of phase `held` with a row of `flow`): its first row is the held step's attempt.
 */
export async function waitForHeldCompletion(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  flow: EagerFlow,
): Promise<HeldCompletion> {
  const held = await worker.waitFor(
    'chaos:batch',
    (m) => m.phase === 'held' && m.rows.some((r) => r.attempt.runId === flow.runId),
    { timeoutMs: 10 * ctx.timings.leaseMs + 20_000 },
  );
  return { token: held.rows[0]?.attempt.token ?? '', stepId: held.rows[0]?.attempt.stepId ?? '' };
}

/** Start a flow whose step `step`'s completion `worker` holds, and that held completion. */
export async function startHeldCompletion(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  name: string,
  step: number,
): Promise<{ flow: EagerFlow; held: HeldCompletion }> {
  const flow = await startEagerFlow(ctx, name, { point: 'completion', step });
  return { flow, held: await waitForHeldCompletion(ctx, worker, flow) };
}

/** Expect the held turn to be an eager one (claimed for the worker by the completion before it). */
export function expectHeldEager(ctx: ScenarioContext, flow: EagerFlow, held: HoldMessage): void {
  ctx.expect(
    held.grant === 'eager',
    `${flow.runId}: the held turn ${held.turnAttempt} was ${held.grant}, want eager`,
  );
}

/** Let a held turn (or eager dispatch) go on. */
export function releaseHold(worker: WorkerProcess, hold: HoldMessage): void {
  worker.command({ token: hold.token, action: 'release-hold', by: 'scenario' });
}

export interface FlowStep {
  readonly id: string;
  readonly seq: number;
  readonly status: string;
  readonly token: string;
  readonly workerId: string | null;
}

/** The run's activity steps in the order the flow scheduled them. */
export async function flowSteps(ctx: ScenarioContext, runId: string): Promise<FlowStep[]> {
  const rows = await ctx.sql.unsafe<
    { id: string; seq: number; status: string; token: string; worker_id: string | null }[]
  >(
    `SELECT id::text, seq, status, fencing_token::text AS token, worker_id FROM "${ctx.schema}".steps
      WHERE run_id = $1 AND kind = 'activity' AND retired_at IS NULL ORDER BY seq`,
    [runId],
  );
  return rows.map((r) => ({ id: r.id, seq: r.seq, status: r.status, token: r.token, workerId: r.worker_id }));
}

/** The step at flow position `index` once it exists (bounded polling). */
export async function flowStep(ctx: ScenarioContext, runId: string, index: number): Promise<FlowStep> {
  return ctx.poll(`step ${index} of run ${runId}`, async () => (await flowSteps(ctx, runId))[index]);
}

/** The run's turn attempts (engine bookkeeping, read for the scenario's own assertions). */
export async function turnAttempts(
  ctx: ScenarioContext,
  runId: string,
): Promise<{ attempt: number; token: string; workerId: string; outcome: string | null }[]> {
  const rows = await ctx.sql.unsafe<
    { attempt: number; token: string; worker_id: string; outcome: string | null }[]
  >(
    `SELECT attempt, fencing_token::text AS token, worker_id, outcome FROM "${ctx.schema}".attempts
      WHERE run_id = $1 AND kind = 'turn' ORDER BY fencing_token`,
    [runId],
  );
  return rows.map((r) => ({ attempt: r.attempt, token: r.token, workerId: r.worker_id, outcome: r.outcome }));
}

/**
 * Wait for the run to end and expect it completed with {@link FLOW_STEPS} steps, each completed once; each step
 * granted `grants` times and its code started `starts` times (1 and 1 unless `expect` says otherwise for its
 * index). @returns the steps and their grants (operator revokes left out).
 */
export async function expectFlowCompleted(
  ctx: ScenarioContext,
  runId: string,
  what: string,
  expect: ReadonlyMap<number, { grants: number; starts: number }> = new Map(),
): Promise<{ steps: FlowStep[]; grants: Grant[][] }> {
  const L = ctx.timings.leaseMs;
  const status = await ctx.waitForRunEnd(runId, 10 * L + 20_000);
  ctx.expect(status === 'completed', `${runId} (${what}): run ${status}, want completed`);
  const steps = await flowSteps(ctx, runId);
  ctx.expect(steps.length === FLOW_STEPS, `${runId} (${what}): ${steps.length} steps, want ${FLOW_STEPS}`);
  const history = ctx.history();
  const grants: Grant[][] = [];
  for (const [i, step] of steps.entries()) {
    const g = await stepGrants(ctx, step.id, what);
    grants.push(g);
    const starts = history.filter((m) => m.type === 'fixture:started' && m.attempt.stepId === step.id);
    const want = expect.get(i) ?? { grants: 1, starts: 1 };
    ctx.expect(
      step.status === 'completed' && g.length === want.grants && starts.length === want.starts,
      `${runId} (${what}): step ${i} ${step.status}, ${g.length} grants, started ${starts.length}×, ` +
        `want completed after ${want.grants} grants, started ${want.starts}×`,
    );
  }
  return { steps, grants };
}

/**
 * Spawn worker B (`b<i>`) once A holds step `k` under `token` (killed or frozen): B claims the step when its lease
 * expired and finishes the run. Expect the flow completed with step `k` granted and started twice (A's attempt
 * and B's) and ended under B's token (and, given `stepId`, that step). @returns B and the flow's steps.
 */
export async function finishWithB(
  ctx: ScenarioContext,
  i: number,
  flow: EagerFlow,
  what: string,
  k: number,
  held: { token: string; stepId?: string },
): Promise<{ b: WorkerProcess; steps: FlowStep[] }> {
  const b = await ctx.spawnWorker({ workerId: `b${i}` });
  const { steps } = await expectFlowCompleted(
    ctx,
    flow.runId,
    what,
    new Map([[k, { grants: 2, starts: 2 }]]),
  );
  ctx.expect(
    (held.stepId === undefined || steps[k]?.id === held.stepId) &&
      steps[k]?.token !== held.token &&
      steps[k]?.workerId === b.workerId,
    `${flow.runId}: step ${k} ended under ${steps[k]?.token} by ${steps[k]?.workerId}, want B's token`,
  );
  return { b, steps };
}

/**
 * Drop the server's reply to the statement carrying step `k`'s tag (its input or output: the turn commit that
 * schedules it, its completion), once `send()` (if given) sent it; see ../proxy-faults.ts `dropReply`. @returns
 * the connection whose reply is dropped; undefined, once the flow ended without the fault, if the statement never
 * crossed the proxy (`missed` is a failed expectation).
 */
export async function dropFlowReply(
  ctx: ScenarioContext,
  proxy: TcpProxy,
  flow: EagerFlow,
  k: number,
  o: { send?: () => void; missed: string },
): Promise<number | undefined> {
  const connection = await dropReply(ctx, proxy, {
    ...o,
    marker: JSON.stringify(flow.tags[k]),
    timeoutMs: 10 * ctx.timings.leaseMs + 20_000,
  });
  if (connection === undefined) await expectFlowCompleted(ctx, flow.runId, 'no fault');
  return connection;
}

/** How often any worker of the scenario started an attempt under `token`. */
export function startsUnder(ctx: ScenarioContext, token: string | undefined): number {
  return ctx.history().filter((m) => m.type === 'fixture:started' && m.attempt.token === token).length;
}

/**
 * The `attempt:stale-rejected` events the engine recorded for turn commits under `token` (reason each). The
 * checker never reads the engine's events; this is a scenario's own assertion.
 */
export async function rejectedTurnCommits(ctx: ScenarioContext, token: string): Promise<string[]> {
  const rows = await ctx.sql.unsafe<{ reason: string }[]>(
    `SELECT data->>'reason' AS reason FROM "${ctx.schema}".events
      WHERE type = 'attempt:stale-rejected' AND data->>'operation' = 'turn-commit' AND fencing_token = $1::bigint`,
    [token],
  );
  return rows.map((r) => r.reason);
}

/**
 * Whether step `stepId` was granted by the commit that created it (eager dispatch): its first audit row is the
 * insert, already running, under a token.
 */
export async function grantedAtInsert(
  ctx: ScenarioContext,
  stepId: string,
): Promise<{ eager: boolean; token: string | null; workerId: string | null }> {
  const [row] = await ctx.sql.unsafe<
    { op: string; status: string; token: string | null; worker_id: string | null }[]
  >(
    `SELECT op, status, fencing_token::text AS token, worker_id FROM "${ctx.schema}".audit
      WHERE step_id = $1 ORDER BY id LIMIT 1`,
    [stepId],
  );
  return {
    eager: row?.op === 'insert' && row.status === 'running' && row.token !== null,
    token: row?.token ?? null,
    workerId: row?.worker_id ?? null,
  };
}

/**
 * Release `a`'s held completion under `token` (after it was thawed, past its lease) and expect it refused: its
 * statement answered `rejected` and an `attempt:stale-rejected` recorded for it. @returns the recorded reason.
 */
export async function expectLateCompletionRefused(
  ctx: ScenarioContext,
  a: WorkerProcess,
  runId: string,
  token: string,
): Promise<string | undefined> {
  const from = a.mark();
  a.command({ token, action: 'release-completion', by: 'scenario' });
  const answered = await a
    .waitFor('chaos:batch', (m) => m.phase === 'answered' && m.rows.some((r) => r.attempt.token === token), {
      after: from,
      timeoutMs: 10_000,
    })
    .catch(() => undefined);
  const outcome = answered?.rows.find((r) => r.attempt.token === token)?.outcome;
  ctx.expect(
    outcome === 'rejected',
    `${runId}: A's late completion under ${token} was answered ${outcome ?? 'never'}, want rejected`,
  );
  const rejected = await rejectedCompletions(ctx, [token]);
  ctx.expect(rejected.has(token), `${runId}: A's late completion under ${token} was not recorded as stale`);
  return rejected.get(token);
}

/**
 * Hold the run's row while `a`'s held completion under `token` is released, so that its statement waits in its
 * run lock, and terminate that backend (found by `applicationName` and the statement's `pattern`).
 */
export async function terminateReleasedCompletion(
  ctx: ScenarioContext,
  a: WorkerProcess,
  runId: string,
  token: string,
  backend: { applicationName: string; pattern: string },
): Promise<void> {
  await terminateWhileLocked(ctx, {
    lock: { table: 'runs', id: runId },
    backend,
    release: () => a.command({ token, action: 'release-completion', by: 'scenario' }),
    label: runId,
  });
}

/** Expect `a`'s completion under `token` answered `applied` exactly once since `from`, never recorded as stale. */
export async function expectAppliedOnce(
  ctx: ScenarioContext,
  a: WorkerProcess,
  runId: string,
  token: string,
  from: number,
): Promise<void> {
  expectAnsweredOnce(ctx, a, runId, [token], 'applied', {
    after: from,
    since: ' after the termination',
    because: ' (the terminated statement committed nothing)',
  });
  await expectNoneStale(ctx, runId, [token]);
}
