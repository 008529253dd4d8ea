/**
 * What a scenario reads and asserts of a step's completion — a statement recording its outcome, alone, in a batch
 * (./batch-wave.ts) or fused with a turn (./eager-flow.ts): the step's grants, how each row of the statement was
 * answered, whether the worker heard of it, and whether the engine recorded it as stale. The checker never reads
 * the engine's events nor the workers' answers; these are a scenario's own assertions.
 */
import type { WorkerProcess } from '../../support/worker-process.js';
import { readGrants, type Grant } from '../checker.js';
import type { ScenarioContext } from '../harness.js';

export type Answer = 'applied' | 'replayed' | 'rejected';

/** The step's grants, operator revokes left out; with `what`, their count is sampled as `attemptsPerStep <what>`. */
export async function stepGrants(ctx: ScenarioContext, stepId: string, what?: string): Promise<Grant[]> {
  const grants = (await readGrants(ctx.sql, ctx.schema, stepId)).filter((g) => !g.revoke);
  if (what !== undefined) ctx.sample(`attemptsPerStep ${what}`, grants.length);
  return grants;
}

/** Each of `tokens`' answers in `worker`'s `answered` batches (after message `after`), in order. */
export function answersOf(worker: WorkerProcess, tokens: Iterable<string>, after = 0): Map<string, Answer[]> {
  const answers = new Map<string, Answer[]>([...tokens].map((t) => [t, []]));
  for (const m of worker.messages.slice(after)) {
    if (m.type !== 'chaos:batch' || m.phase !== 'answered') continue;
    for (const r of m.rows) {
      if (r.outcome) answers.get(r.attempt.token)?.push(r.outcome);
    }
  }
  return answers;
}

/**
 * Expect each of `worker`'s completions under `tokens` answered `want` exactly once since message `after` (read
 * once, for all of them). `since` and `because` say more in a failure (after `never`, after `want … once`).
 */
export function expectAnsweredOnce(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  label: string,
  tokens: Iterable<string>,
  want: Answer,
  o: { after: number; since?: string; because?: string },
): void {
  for (const [token, got] of answersOf(worker, tokens, o.after)) {
    ctx.expect(
      got.length === 1 && got[0] === want,
      `${label}: the completion under ${token} was answered ${got.join(', ') || 'never'}${o.since ?? ''}, ` +
        `want ${want} once${o.because ?? ''}`,
    );
  }
}

/** Expect `worker` to report its completion under `token` acknowledged (after message `after`) within `timeoutMs`. */
export async function expectAcknowledged(
  ctx: ScenarioContext,
  worker: WorkerProcess,
  label: string,
  token: string,
  o: { after?: number; timeoutMs: number },
): Promise<void> {
  const acked = await worker
    .waitFor('attempt:completed', (m) => m.attempt.token === token, o)
    .then(() => true)
    .catch(() => false);
  ctx.expect(acked, `${label}: A never saw its completion under ${token} acknowledged`);
}

/**
 * The `attempt:stale-rejected` events of completions (`operation` complete) the engine recorded for `tokens`:
 * token → reason.
 */
export async function rejectedCompletions(
  ctx: ScenarioContext,
  tokens: Iterable<string>,
): Promise<Map<string, string>> {
  const rows = await ctx.sql.unsafe<{ token: string; reason: string }[]>(
    `SELECT fencing_token::text AS token, data->>'reason' AS reason FROM "${ctx.schema}".events
      WHERE type = 'attempt:stale-rejected' AND data->>'operation' = 'complete'
        AND fencing_token = ANY($1::bigint[])`,
    [[...tokens]],
  );
  return new Map(rows.map((r) => [r.token, r.reason]));
}

/** Expect none of the completions under `tokens` recorded as stale. */
export async function expectNoneStale(
  ctx: ScenarioContext,
  label: string,
  tokens: Iterable<string>,
): Promise<void> {
  const all = [...tokens];
  const rejected = await rejectedCompletions(ctx, all);
  for (const token of all) {
    ctx.expect(!rejected.has(token), `${label}: the completion under ${token} was recorded as stale`);
  }
}
