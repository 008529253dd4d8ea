/** `ctx.waitForSignal(signal, options)`: a durable wait for a signal sent to the run, with an optional timeout. */
import { InvalidOptionsError, MAX_SLEEP_MS, type Duration, type SignalDefinition } from '@palisade/sdk';
import { formatIssues, parseOptions, toMs, validate } from '@palisade/sdk/internal';
import { z } from 'zod';
import type { PendingSignal } from '../contract.js';
import type { ReplayState } from '../replay-state.js';

/** The options of `ctx.waitForSignal`: only `timeoutMs`, a duration checked where it is used ({@link toMs}). */
const waitOptionsSchema = z.object({ timeoutMs: z.unknown().optional() }).strict();

/**
 * `ctx.waitForSignal`: the payload of the next signal named `signal.name` that the run takes (with a timeout:
 * `{ timedOut: false, payload }`, or `{ timedOut: true }` once `timeoutMs` passed first by the DB clock). Something
 * that is not a signal, or options other than `{ timeoutMs }`, throw {@link InvalidOptionsError} at the call.
 */
export function waitForSignal<T>(
  state: ReplayState,
  signal: SignalDefinition,
  options?: { timeoutMs?: Duration },
): Promise<T> {
  const { workflowName, runId } = state;
  if (!signal || (signal as { kind?: unknown }).kind !== 'signal') {
    throw new InvalidOptionsError(`ctx.waitForSignal in workflow ${workflowName}`, [
      { path: 'signal', message: 'must be a signal from defineSignal()' },
    ]);
  }
  const where = `ctx.waitForSignal(${signal.name}) in workflow ${workflowName}`;
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw new InvalidOptionsError(where, [{ path: 'options', message: 'must be { timeoutMs }' }]);
  }
  // Checked as every other options object is, so an old name (`timeout`) gets the same rename hint.
  parseOptions(waitOptionsSchema, options ?? {}, where);
  const withTimeout = options?.timeoutMs !== undefined;
  const timeoutMs = withTimeout
    ? toMs(options.timeoutMs as Duration, `timeoutMs of ${where}`, MAX_SLEEP_MS)
    : undefined;
  // A pending signal is checked against the schema of the code that waits for it before the wait takes it
  // (one sent from the CLI, or by a sender with another version of the schema, was not): a payload the
  // schema refuses is recorded undelivered, with the schema's message, and the wait goes on waiting — a
  // mistyped signal never costs the run. The turn decides once; its commit records it, so no replay sees it.
  const refuses = (pending: PendingSignal): string | undefined => {
    const parsed = signal.payload.safeParse(pending.payload);
    if (parsed.success) return undefined;
    const issues = formatIssues(parsed.error.issues).map((i) => `${i.path || '(root)'}: ${i.message}`);
    return `payload of signal ${signal.name} #${pending.id} does not fit ${where}: ${issues.join('; ')}`;
  };
  // The stored outcome: `{ signalId, payload }`, or `{ timedOut: true }` when the timeout passed first. The
  // payload was checked when the wait took it; a wait recorded with a payload its schema refuses (taken
  // before that check, or by code whose schema has changed since) rejects the await with ValidationError.
  const map = (stored: unknown): unknown => {
    const o = (stored ?? {}) as { timedOut?: boolean; signalId?: string; payload?: unknown };
    if (withTimeout && o.timedOut === true) return { timedOut: true };
    const payload: unknown = validate(
      signal.payload,
      o.payload,
      `payload of signal ${signal.name} #${String(o.signalId)} taken by ${where}`,
      { runId },
    );
    return withTimeout ? { timedOut: false, payload } : payload;
  };
  return state.durable<T>(
    'signal',
    signal.name,
    (seq) => ({ seq, kind: 'signal', name: signal.name, ...(timeoutMs !== undefined ? { timeoutMs } : {}) }),
    map,
    refuses,
  );
}
