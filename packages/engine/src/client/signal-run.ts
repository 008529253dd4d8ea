import {
  InvalidOptionsError,
  PAYLOAD_LIMITS,
  RunEndedError,
  RunNotFoundError,
  type SignalDefinition,
} from '@palisade/sdk';
import { echoed, checkPayload, validate, definitionProblem } from '@palisade/sdk/internal';
import type { Database } from '../db/database.js';
import { withInfraRetry } from '../infra-retry.js';
import { sendSignal, storeSignal, type SentSignal } from '../queries/send-signal.js';
import type { SchemaNames } from '../queries/schema-names.js';
import { uuid7 } from '../turn/uuid7.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * `payload` checked against `signal`'s schema and made storable: a copy of it as given (the wait parses it).
 * @throws InvalidOptionsError when `signal` is not from defineSignal(); ValidationError naming the bad field;
 * PalisadeError `PAYLOAD_TOO_LARGE` over `PAYLOAD_LIMITS.inputBytes`.
 */
export function signalPayload(signal: SignalDefinition, payload: unknown, call: string): unknown {
  const problem = definitionProblem(signal, 'signal');
  if (problem) {
    throw new InvalidOptionsError(call, [
      { path: problem.path ? `signal.${problem.path}` : 'signal', message: problem.message },
    ]);
  }
  const what = `payload of signal ${signal.name}`;
  validate(signal.payload, payload, what);
  // Stored as given, not as the schema's output: the wait parses it with the schema when the code takes it, so a
  // schema with transforms yields its output type there (and a stored output would not parse again).
  return JSON.parse(checkPayload(payload, what, PAYLOAD_LIMITS.inputBytes));
}

/**
 * Send `payload` (checked already: {@link signalPayload}) as signal `name` to workflow run `runId`; durable once
 * this returns. Retried on a transient database error, stored once (one request id for every try).
 * @returns the signal's id (its place in the run's arrival order).
 * @throws RunNotFoundError when there is no such run; InvalidOptionsError when it is not a workflow run;
 * RunEndedError (`RUN_ENDED`) when it has ended.
 */
export async function signalRun(
  db: Database,
  names: SchemaNames,
  p: { runId: string; name: string; payload: unknown },
): Promise<string> {
  if (!UUID.test(String(p.runId))) throw new RunNotFoundError(`run ${echoed(p.runId)}`);
  const requestId = uuid7();
  const sent = await withInfraRetry(() =>
    sendSignal(db, names, { runId: p.runId, name: p.name, payload: p.payload, requestId }),
  );
  return signalIdOf(sent, p);
}

/**
 * {@link signalRun} in the caller's transaction `tx`, not retried (the caller retries its transaction whole, with
 * the same `requestId`, so the signal is stored once).
 * @returns the signal's id. @throws as {@link signalRun}.
 */
export async function signalRunIn(
  tx: Pick<Database, 'rows'>,
  names: SchemaNames,
  p: { runId: string; name: string; payload: unknown; requestId: string },
): Promise<string> {
  return signalIdOf(await storeSignal(tx, names, p), p);
}

/** The signal's id from what storing it found, or the error that says why it was not stored. */
function signalIdOf(sent: SentSignal | undefined, p: { runId: string; name: string }): string {
  if (!sent) throw new RunNotFoundError(`run ${echoed(p.runId)}`);
  if (sent.kind !== 'workflow') {
    throw new InvalidOptionsError(`signal ${echoed(p.name)}`, [
      {
        path: 'runId',
        message: `run ${echoed(p.runId)} is a standalone activity run (enqueue); only workflow runs take signals`,
      },
    ]);
  }
  if (sent.signalId === null) throw new RunEndedError(p.runId, sent.status, `signal ${echoed(p.name)}`);
  return sent.signalId;
}
