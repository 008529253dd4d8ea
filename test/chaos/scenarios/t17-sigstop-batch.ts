/**
 * T17 — SIGSTOP/SIGCONT with a batched completion in flight. Worker A gathers a wave of six short runs whose
 * completions go in one statement (./batch-wave.ts), held before it is sent, and is frozen there:
 *
 * - `past-lease`: A stays frozen until every lease of the batch has expired and worker B has reclaimed and
 *   completed each step; then A resumes and its batch is sent. Each row is refused on its own by its fence,
 *   recorded as a stale completion (`attempt:stale-rejected`, operation `complete`), and B's completions stand;
 * - `superseded-row`: while A is frozen (briefly, within its leases), one or two rows of the batch are taken away
 *   by an operator revoke (a new token); A resumes and its batch is sent: the revoked rows are refused and
 *   recorded, their neighbours in the same statement apply, and the revoked steps run again and complete once.
 *
 * Pass: the checker's zeros, every run completed, the held batch held all six rows, and each row's answer in the
 * statement (reported by the engine's `completion:after-commit` fault point) as above.
 */
import { defineScenario } from '../define-scenario.js';
import {
  WAVE_CONCURRENCY,
  expectWaveCompleted,
  finalSteps,
  startHeldWave,
  waitForBatch,
} from './batch-wave.js';
import { answersOf, rejectedCompletions, stepGrants } from './completions.js';

export const sigstopBatch = defineScenario('T17 SIGSTOP mid-batch', {
  description:
    'freeze a worker whose batched completion (6 rows) is in flight, past its leases / while a row is revoked; stale rows refused alone',
  iterations: { full: 6, ci: 2, variants: ['past-lease', 'superseded-row'] as const },
  setup: (ctx) => ctx.spawnWorker({ workerId: 'a', concurrency: WAVE_CONCURRENCY }),
  async iteration(ctx, { i, variant }, a) {
    const { wave, tokens, release } = await startHeldWave(ctx, `t17-${i}`, a);
    const heldTokens = new Set(tokens.values());
    a.kill('SIGSTOP');
    ctx.fault(`sigstop ${variant}`);

    let refused: Set<string>;
    if (variant === 'past-lease') {
      const b = await ctx.spawnWorker({ workerId: `b${i}`, concurrency: WAVE_CONCURRENCY });
      await expectWaveCompleted(ctx, wave, variant);
      refused = heldTokens;
      const final = await finalSteps(ctx, wave);
      for (const [stepId, token] of tokens) {
        const step = final.get(stepId);
        ctx.expect(
          step?.status === 'completed' && step.token !== token && step.workerId === b.workerId,
          `${wave.key} (${variant}): step ${stepId} ${step?.status} under ${step?.token} by ${step?.workerId}, ` +
            `want completed by ${b.workerId} while A was frozen`,
        );
      }
      a.kill('SIGCONT');
      await b.stop();
    } else {
      const k = ctx.rng.int(1, 2);
      const revoked = [...wave.runs].sort(() => ctx.rng.next() - 0.5).slice(0, k);
      for (const run of revoked) await ctx.revoke(run.stepId);
      refused = new Set(revoked.map((r) => tokens.get(r.stepId) ?? ''));
      a.kill('SIGCONT');
    }
    const from = a.mark();
    release();
    const answered = await waitForBatch(ctx, a, wave, 'answered', { after: from, tokens: heldTokens });
    ctx.sample('batchRows answered', answered.rows.length);
    await expectWaveCompleted(ctx, wave, variant);

    const answers = answersOf(a, heldTokens);
    const rejected = await rejectedCompletions(ctx, heldTokens);
    const final = await finalSteps(ctx, wave);
    let applied = 0;
    for (const [stepId, token] of tokens) {
      const want = refused.has(token) ? 'rejected' : 'applied';
      const got = answers.get(token) ?? [];
      if (got[0] === 'applied') applied++;
      ctx.expect(
        got.length === 1 && got[0] === want,
        `${wave.key} (${variant}): the row of ${token} was answered ${got.join(', ') || 'never'}, want ${want}`,
      );
      ctx.expect(
        rejected.has(token) === refused.has(token),
        `${wave.key} (${variant}): the completion under ${token} ${rejected.has(token) ? 'was' : 'was not'} ` +
          `recorded as stale-rejected (${rejected.get(token) ?? '-'})`,
      );
      const step = final.get(stepId);
      const grants = await stepGrants(ctx, stepId, variant);
      ctx.expect(
        refused.has(token) ? step?.token !== token : step?.token === token && grants.length === 1,
        `${wave.key} (${variant}): step ${stepId} ended under ${step?.token} after ${grants.length} grants ` +
          `(A's token ${token}, ${refused.has(token) ? 'refused' : 'applied'})`,
      );
    }
    if (variant === 'superseded-row') {
      ctx.expect(
        applied > 0 && applied < tokens.size,
        `${wave.key}: ${applied} rows applied, want a mixed batch`,
      );
    }
    ctx.fault(`${variant}: ${tokens.size - applied} of ${tokens.size} rows refused in one statement`);
  },
});
