/**
 * A writer frozen inside its fenced write does not hold the scope's row (`idleInTransactionTimeoutMs` of
 * `createFencedResource`): writer A, a process of its own (../fixtures/fenced-writer-main.ts), runs
 * `resource.write({ scope, token: 5n }, …)` (or `accept`) and is SIGSTOPped at one point of its transaction;
 * while it stays stopped the test's own write with a higher token on the same scope completes, and once A is
 * continued its write fails and none of its rows is committed. No timing is asserted: B completing while A is
 * stopped is the proof. A refused writer holds the row too, until it rolls back: so does one stopped there.
 * Between the two steps of a statement the engine's postgres.js leaves the server idle (its patched driver ends
 * the first step with Sync); upstream's leaves it in the middle of the statement, not idle to the server, and
 * there the test's fence, configured as A's, waits as long for the row and then ends A's stalled session itself
 * (found by the row A locked, or as a stalled writer of A's uncommitted first row).
 */
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createFencedResource } from '@palisade/engine';
import { useEngineTarget } from '../support/engine.js';
import { useWorkerProcesses, type WorkerProcess } from '../support/worker-process.js';
import type { ChildMessageType } from '../fixtures/worker-protocol.js';
import type {
  FencedWriterConfig,
  FencedWriterMessage,
  FencedWriterPoint,
} from '../fixtures/fenced-writer-main.js';

const FENCED_WRITER_MAIN = fileURLToPath(new URL('../fixtures/fenced-writer-main.ts', import.meta.url));
const IDLE_TIMEOUT_MS = 500;

interface Case {
  readonly name: string;
  readonly point: FencedWriterPoint;
  readonly operation: FencedWriterConfig['operation'];
  /** A token recorded before A writes (A's 5 is then refused), and the test's, higher still. */
  readonly recorded?: bigint;
  /** A lower token recorded before A writes: the scope's row is committed when A takes it (A's 5 is accepted). */
  readonly earlier?: bigint;
  /** A's client: the engine's postgres.js, or upstream's (which leaves the server mid-statement). @default engine */
  readonly driver?: 'engine' | 'upstream';
  /**
   * Whether the test's writer is configured as A is (idle timeout {@link IDLE_TIMEOUT_MS}), so that its fence,
   * having waited that long for the row, ends A's session itself when A is stalled where the server's idle timeout
   * does not count. Otherwise it has the default (60 s): only the server ending A's session lets it in.
   */
  readonly preempts?: boolean;
  /**
   * Whether A surely holds the scope's row where it is stopped: then only the server ending its session lets B in,
   * and that end is what A hears. (Once its timeout is set, it does if the fence came in the same message.)
   */
  readonly holdsRow: boolean;
}

const CASES: readonly Case[] = [
  { name: 'right after BEGIN', point: 'after-begin', operation: 'write', holdsRow: false },
  { name: 'once its idle timeout is set', point: 'after-timeout-set', operation: 'write', holdsRow: false },
  { name: 'once it holds the fence row', point: 'after-fence', operation: 'write', holdsRow: true },
  {
    name: 'inside a statement of its callback, between its two steps',
    point: 'inside-statement',
    operation: 'write',
    holdsRow: true,
  },
  {
    name: 'inside a statement of its callback on upstream postgres.js (the scope’s first write)',
    point: 'inside-statement',
    operation: 'write',
    driver: 'upstream',
    preempts: true,
    holdsRow: true,
  },
  {
    name: 'inside a statement of its callback on upstream postgres.js (a row written before)',
    point: 'inside-statement',
    operation: 'write',
    driver: 'upstream',
    preempts: true,
    earlier: 1n,
    holdsRow: true,
  },
  {
    name: 'between two statements of its callback',
    point: 'between-statements',
    operation: 'write',
    holdsRow: true,
  },
  { name: 'just before COMMIT', point: 'before-commit', operation: 'write', holdsRow: true },
  {
    name: 'after its fence refused it',
    point: 'refused',
    operation: 'write',
    recorded: 6n,
    holdsRow: true,
  },
  { name: 'inside accept, before COMMIT', point: 'after-fence', operation: 'accept', holdsRow: true },
];

/** The first message of `type` from the writer (its messages are its own, not ./worker-protocol.ts's). */
function writerMessage<T extends FencedWriterMessage['type']>(
  writer: WorkerProcess,
  type: T,
): Promise<Extract<FencedWriterMessage, { type: T }>> {
  return writer.waitFor(type as ChildMessageType) as unknown as Promise<
    Extract<FencedWriterMessage, { type: T }>
  >;
}

describe('a writer frozen inside its fenced write', () => {
  const target = useEngineTarget('postgres');
  const workers = useWorkerProcesses();

  for (const c of CASES) {
    it(`lets a higher token write while the writer is stopped ${c.name}, and never commits the stopped write`, async () => {
      const sql = target.sql();
      const schema = `frozen_${randomBytes(5).toString('hex')}`;
      const resource = createFencedResource({
        sql,
        schema,
        ...(c.preempts ? { idleInTransactionTimeoutMs: IDLE_TIMEOUT_MS } : {}),
      });
      await resource.install();
      await sql.unsafe(`CREATE TABLE "${schema}".writes (writer text NOT NULL, statement integer NOT NULL)`);
      const scope = `doc:${c.point}`;
      if (c.recorded !== undefined) await resource.accept({ scope, token: c.recorded });
      if (c.earlier !== undefined) await resource.accept({ scope, token: c.earlier });
      const token = (c.recorded ?? 5n) + 1n;
      const config: FencedWriterConfig = {
        databaseUrl: target.url(),
        schema,
        workerId: 'A',
        timings: { leaseMs: 0 }, // unused: the writer runs no activities
        point: c.point,
        operation: c.operation,
        scope,
        idleInTransactionTimeoutMs: IDLE_TIMEOUT_MS,
        driver: c.driver ?? 'engine',
      };
      const a = await workers.spawn(config, { entry: FENCED_WRITER_MAIN });

      await writerMessage(a, 'fence:held');
      a.kill('SIGSTOP');
      await resource.write({ scope, token }, (tx) =>
        tx.unsafe(`INSERT INTO "${schema}".writes (writer, statement) VALUES ('B', 1)`),
      );
      expect(a.kill('SIGCONT')).toBe(true);

      const outcome = await writerMessage(a, 'fence:outcome');
      expect(outcome.committed).toBe(false);
      if (c.holdsRow) {
        // B got the row while A was stopped: the server ended A's session.
        expect(outcome.error?.code).not.toBe('LEASE_LOST');
      } else if (c.point === 'after-begin') {
        // Stopped before its fence, A locked nothing and set no timeout yet: it comes back to B's token.
        expect(outcome.error).toMatchObject({ code: 'LEASE_LOST', staleToken: '5', currentToken: '6' });
      }
      expect(await resource.highest(scope)).toBe(token);
      expect(
        await sql.unsafe<{ writer: string; statement: number }[]>(
          `SELECT writer, statement FROM "${schema}".writes ORDER BY writer, statement`,
        ),
      ).toEqual([{ writer: 'B', statement: 1 }]);
    }, 60_000);
  }
});
