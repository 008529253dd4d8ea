/**
 * Where the round trips go: counts and client-observed time of every engine statement, by kind.
 *
 * Every engine statement goes through `Database.rows(query)` (transactions through `Database.transaction`), so
 * wrapping those two methods on the engine database's prototype sees all of them — the client's, the claim
 * loops', the heartbeat connection's and those inside a transaction — without touching engine code. A
 * statement's kind is recognised from its SQL text (see {@link KINDS}); statements inside a transaction are
 * prefixed `tx:`. A transaction costs two more round trips (BEGIN, COMMIT), counted as `transactions`.
 *
 * The wrapping is process-wide and permanent once installed (the benchmark is its own process).
 */
import type { SQL } from 'drizzle-orm';
import type postgres from '@palisade/engine/postgres';
import type { Database } from '@palisade/engine';

export interface StatementStat {
  count: number;
  totalMs: number;
  maxMs: number;
  /** Rows returned in all (claims: rows claimed). */
  rows: number;
  errors: number;
}

export interface ProfileSnapshot {
  readonly statements: Readonly<Record<string, StatementStat>>;
  readonly transactions: { count: number; totalMs: number };
}

/** Statement kinds, first match wins; the patterns are distinctive fragments of each engine query. */
const KINDS: readonly (readonly [string, RegExp])[] = [
  ['enqueue', /SELECT run_id, 'activity', \$, 'pending'/],
  // Before start-workflow: the statement that fires schedule ticks starts runs too. (Its compare-and-set on the
  // schedule version, not its SKIP LOCKED, which the step claim shares.)
  ['fire-schedule-ticks', /s\.version = d\.v/],
  ['read-due-schedules', /s\.buffered_tick_at IS NOT NULL AND NOT s\.paused/],
  ['start-workflow', /'run:started'/],
  ['claim-steps', /prev_deadline_at/],
  // Before claim-turns: a completion that may claim the woken turn (an eager turn) also ends a turn attempt.
  ['complete-step', /SET status = 'completed', output = i\.payload/],
  ['claim-turns', /ended_turns AS/],
  ['next-due-step', /min\((x\.)?next_run_at\) - [\s\S]*AS wait_ms/],
  ['next-due-turn', /min\(greatest\(turn_next_run_at/],
  ['fail-step', /'step:failed'|retry_delay_ms[\s\S]*'attempt:failed'/],
  ['heartbeat', /renewed AS \(/],
  ['expire-steps', /'LeaseExpired'/],
  ['find-claimed-by-request', /claim_request_id = /],
  ['release-step', /'released'/],
  ['load-run-history', /AS finished_ms/],
  ['commit-turn', /run_row AS \(/],
  ['read-run', /FROM "[^"]+"\."runs"\s+WHERE id = /],
];

/** The SQL text of a drizzle `SQL` object, parameters shown as `$` (duck-typed: no drizzle internals imported). */
function sqlText(chunk: unknown, out: string[]): void {
  if (typeof chunk !== 'object' || chunk === null) {
    out.push('$');
    return;
  }
  const nested = (chunk as { queryChunks?: unknown }).queryChunks;
  if (Array.isArray(nested)) {
    for (const c of nested) sqlText(c, out);
    return;
  }
  const value = (chunk as { value?: unknown }).value;
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) out.push(value.join(''));
  else out.push('$');
}

const kindCache = new Map<string, string>();

/** The kind of a statement, e.g. `claim-steps`; unknown statements by their first words. */
export function statementKind(query: SQL): string {
  const parts: string[] = [];
  sqlText(query, parts);
  const text = parts.join('');
  const cached = kindCache.get(text);
  if (cached !== undefined) return cached;
  const kind =
    KINDS.find(([, pattern]) => pattern.test(text))?.[0] ??
    `other: ${text.replace(/\s+/g, ' ').trim().slice(0, 60)}`;
  if (kindCache.size < 1_000) kindCache.set(text, kind);
  return kind;
}

/** Called with every statement's kind and client-observed time, once recorded. */
export type StatementListener = (kind: string, ms: number) => void;

class Recorder {
  statements = new Map<string, StatementStat>();
  transactions = { count: 0, totalMs: 0 };
  listeners = new Set<StatementListener>();

  record(kind: string, ms: number, rows: number, failed: boolean): void {
    for (const listener of this.listeners) listener(kind, ms);
    let stat = this.statements.get(kind);
    if (!stat) this.statements.set(kind, (stat = { count: 0, totalMs: 0, maxMs: 0, rows: 0, errors: 0 }));
    stat.count++;
    stat.totalMs += ms;
    stat.maxMs = Math.max(stat.maxMs, ms);
    stat.rows += rows;
    if (failed) stat.errors++;
  }

  /** Start new maxima (a maximum cannot be differenced between snapshots). */
  resetMaxima(): void {
    for (const stat of this.statements.values()) stat.maxMs = 0;
  }

  snapshot(): ProfileSnapshot {
    return {
      statements: Object.fromEntries([...this.statements].map(([k, v]) => [k, { ...v }])),
      transactions: { ...this.transactions },
    };
  }
}

const recorder = new Recorder();
const PATCHED = Symbol.for('palisade.bench.profiled');

type DatabaseMethods = Pick<Database, 'rows' | 'transaction'>;

/**
 * Wrap `rows` and `transaction` on the prototype of `database` (idempotent). Statements run before this call
 * are not seen; call it right after creating the first engine.
 */
export function installStatementProfiler(database: Database): void {
  const proto = Object.getPrototypeOf(database) as DatabaseMethods & { [PATCHED]?: true };
  if (proto[PATCHED]) return;
  proto[PATCHED] = true;
  const transactionHandles = new WeakSet<object>();
  const rows = proto.rows;
  const transaction = proto.transaction;
  proto.rows = async function <T>(this: Database, query: SQL): Promise<T[]> {
    const kind = (transactionHandles.has(this) ? 'tx:' : '') + statementKind(query);
    const started = performance.now();
    try {
      const result = await rows.call<Database, [SQL], Promise<T[]>>(this, query);
      recorder.record(kind, performance.now() - started, result.length, false);
      return result;
    } catch (error) {
      recorder.record(kind, performance.now() - started, 0, true);
      throw error;
    }
  };
  proto.transaction = async function <T>(this: Database, fn: (tx: Database) => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await transaction.call<Database, [(tx: Database) => Promise<T>], Promise<T>>(this, (tx) => {
        transactionHandles.add(tx);
        return fn(tx);
      });
    } finally {
      recorder.transactions.count++;
      recorder.transactions.totalMs += performance.now() - started;
    }
  };
}

/**
 * Call `listener` for every statement the profiled engines send from now on (only once
 * {@link installStatementProfiler} ran, i.e. with BENCH_PROFILE on). @returns the function that removes it.
 */
export function onStatement(listener: StatementListener): () => void {
  recorder.listeners.add(listener);
  return () => recorder.listeners.delete(listener);
}

/** Counters so far; `resetMaxima` also starts new per-statement maxima (call it at the start of a phase). */
export function profileSnapshot(options: { resetMaxima?: boolean } = {}): ProfileSnapshot {
  if (options.resetMaxima) recorder.resetMaxima();
  return recorder.snapshot();
}

/** What happened between two snapshots. */
export function profileDiff(before: ProfileSnapshot, after: ProfileSnapshot): ProfileSnapshot {
  const statements: Record<string, StatementStat> = {};
  for (const [kind, a] of Object.entries(after.statements)) {
    const b = before.statements[kind];
    const count = a.count - (b?.count ?? 0);
    if (count === 0) continue;
    statements[kind] = {
      count,
      totalMs: a.totalMs - (b?.totalMs ?? 0),
      maxMs: a.maxMs, // since the last resetMaxima
      rows: a.rows - (b?.rows ?? 0),
      errors: a.errors - (b?.errors ?? 0),
    };
  }
  return {
    statements,
    transactions: {
      count: after.transactions.count - before.transactions.count,
      totalMs: after.transactions.totalMs - before.transactions.totalMs,
    },
  };
}

/** Counts the NOTIFY payloads of one engine schema by kind (`step`, `turn`, `run`), on its own connection. */
export class NotificationCounter {
  readonly counts: Record<string, number> = {};
  private unlisten: (() => Promise<void>) | undefined;

  async start(sql: postgres.Sql, channel: string): Promise<void> {
    const sub = await sql.listen(channel, (payload) => {
      const kind = payload.slice(0, payload.indexOf(':'));
      this.counts[kind] = (this.counts[kind] ?? 0) + 1;
    });
    this.unlisten = () => sub.unlisten();
  }

  snapshot(): Record<string, number> {
    return { ...this.counts };
  }

  async stop(): Promise<void> {
    await this.unlisten?.();
    this.unlisten = undefined;
  }
}
