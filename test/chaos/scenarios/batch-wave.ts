/**
 * Shared by the batched-completion scenarios (T16–T19): a wave of short `chaos-loop` runs that one worker
 * gathers into one batched completion statement (the activity's `batch` option), held before it is sent until
 * the scenario releases it, so a fault meets a batch of several rows in flight.
 */
import type { ChildMessageOf } from '../../fixtures/worker-protocol.js';
import type { WorkerProcess } from '../../support/worker-process.js';
import type { EnqueuedRun, ScenarioContext } from '../harness.js';
import { expectAcknowledged, stepGrants } from './completions.js';

/** Rows of each wave's batch: several, below the worker's concurrency so one worker holds them all. */
export const WAVE_SIZE = 6;
/** Concurrency of a worker that must gather a whole wave. */
export const WAVE_CONCURRENCY = 8;

export type BatchMessage = ChildMessageOf<'chaos:batch'>;

export interface Wave {
  readonly key: string;
  readonly runs: readonly EnqueuedRun[];
  /** Each run's `tag` (its output carries it: the completion statement's text on the wire). */
  readonly tags: readonly string[];
}

/**
 * Enqueue `WAVE_SIZE` runs of two short iterations whose completions gather into one batch on `worker` (held if
 * `hold`); on any other worker they complete as they come.
 */
export async function enqueueWave(
  ctx: ScenarioContext,
  label: string,
  worker: WorkerProcess,
  hold: boolean,
): Promise<Wave> {
  const key = `${label}-${ctx.rng.seed}-${ctx.rng.int(0, 1e9)}`;
  const runs: EnqueuedRun[] = [];
  const tags: string[] = [];
  for (let j = 0; j < WAVE_SIZE; j++) {
    const tag = `${key}#${j}`;
    tags.push(tag);
    runs.push(
      await ctx.enqueue({
        iterations: 2,
        sleepMs: 20,
        tag,
        batch: { key, size: WAVE_SIZE, hold, workerId: worker.workerId },
      }),
    );
  }
  return { key, runs, tags };
}

/** The first `chaos:batch` message of `phase` from `worker` with a row of the wave (after message `after`). */
export function waitForBatch(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  wave: Wave,
  phase: BatchMessage['phase'],
  o: { after?: number; tokens?: ReadonlySet<string>; timeoutMs?: number } = {},
): Promise<BatchMessage> {
  const steps = new Set(wave.runs.map((r) => r.stepId));
  return worker.waitFor(
    'chaos:batch',
    (m) =>
      m.phase === phase &&
      m.rows.some((r) => steps.has(r.attempt.stepId) && (!o.tokens || o.tokens.has(r.attempt.token))),
    { after: o.after ?? 0, timeoutMs: o.timeoutMs ?? 10 * ctx.timings.leaseMs + 20_000 },
  );
}

/**
 * The held batch must carry the whole wave — one row per run — so the fault meets a batch of several rows;
 * recorded as the `batchRows` sample. @returns the token of each step in the batch.
 */
export function expectWholeWave(ctx: ScenarioContext, wave: Wave, batch: BatchMessage): Map<string, string> {
  const tokens = new Map(batch.rows.map((r) => [r.attempt.stepId, r.attempt.token]));
  ctx.sample('batchRows', batch.rows.length);
  ctx.expect(
    batch.rows.length === WAVE_SIZE && wave.runs.every((r) => tokens.has(r.stepId)),
    `${wave.key}: the held batch has ${batch.rows.length} rows (${[...tokens.keys()].join(', ')}), want the wave's ${WAVE_SIZE}`,
  );
  return tokens;
}

/**
 * {@link enqueueWave} on `worker`, held, once its batch is held: expected to carry the whole wave. @returns the
 * wave, the token of each step in the batch, and `release()`, which lets the held batch go.
 */
export async function startHeldWave(
  ctx: ScenarioContext,
  label: string,
  worker: WorkerProcess,
): Promise<{ wave: Wave; tokens: Map<string, string>; release: () => void }> {
  const wave = await enqueueWave(ctx, label, worker, true);
  const held = await waitForBatch(ctx, worker, wave, 'held');
  return { wave, tokens: expectWholeWave(ctx, wave, held), release: () => releaseBatch(worker, held) };
}

/** Let the held batch go (the worker's `release-completion` command). */
function releaseBatch(worker: WorkerProcess, batch: BatchMessage): void {
  const first = batch.rows[0];
  if (first) worker.command({ token: first.attempt.token, action: 'release-completion', by: 'scenario' });
}

/** Each wave step's final status, token and worker in the database. */
export async function finalSteps(
  ctx: ScenarioContext,
  wave: Wave,
): Promise<Map<string, { status: string; token: string; workerId: string | null }>> {
  const rows = await ctx.sql.unsafe<
    { id: string; status: string; token: string; worker_id: string | null }[]
  >(
    `SELECT id::text, status, fencing_token::text AS token, worker_id FROM "${ctx.schema}".steps
      WHERE id = ANY($1::uuid[])`,
    [wave.runs.map((r) => r.stepId)],
  );
  return new Map(rows.map((r) => [r.id, { status: r.status, token: r.token, workerId: r.worker_id }]));
}

/**
 * After a fault that failed the wave's batched completion, so that each completion was retried on its own (T18,
 * T19): expect each step granted once (nothing re-ran; sampled as `attemptsPerStep <what>`) and each completion
 * acknowledged to `worker` (`ack`: after which message, within how long). The size of each batch `worker` had
 * answered since message `from` (the retries) is sampled as `retryBatchRows`.
 */
export async function expectRetriedOnce(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  wave: Wave,
  tokens: ReadonlyMap<string, string>,
  o: { what: string; from: number; ack: { after?: number; timeoutMs: number } },
): Promise<void> {
  for (const m of worker.messages.slice(o.from)) {
    if (m.type === 'chaos:batch' && m.phase === 'answered') ctx.sample('retryBatchRows', m.rows.length);
  }
  for (const [stepId, token] of tokens) {
    const grants = await stepGrants(ctx, stepId, o.what);
    ctx.expect(
      grants.length === 1,
      `${wave.key}: step ${stepId} ${grants.length} grants, want 1 (nothing re-run)`,
    );
    await expectAcknowledged(ctx, worker, wave.key, token, o.ack);
  }
}

/** Wait for every run of the wave to end; expect each completed. */
export async function expectWaveCompleted(ctx: ScenarioContext, wave: Wave, what: string): Promise<void> {
  const L = ctx.timings.leaseMs;
  for (const run of wave.runs) {
    const status = await ctx.waitForRunEnd(run.runId, 10 * L + 20_000);
    ctx.expect(status === 'completed', `${wave.key} (${what}): run ${run.runId} ${status}, want completed`);
  }
}
